"""Admin pages: rules (the effective ladder, history, undo, proposed rules), categories (graduation and
the maturity gate), settings (risk dial with inheritance, review policy, blocks and suppressions, API keys)
and budgets (review rounds N/L, extension grants). Admin keys only; each acts within its own project."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from reviewloop.budget.v1 import budget_pb2
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError, http_status
from reviewloop.review.v1 import review_pb2
from reviewloop.rules.v1 import rules_pb2
from reviewloop.shapes import RISK_DIAL_FIELDS
from reviewloop.shapes.operations import EMAIL
from reviewloop.tenancy import ActorKind
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from gateway import store
from gateway.console import dial_effect, web
from gateway.console.html import csrf_field, h, page, render, table
from gateway.console.sessions import Session
from gateway.translate.budget import as_round_budget
from gateway.translate.reviews import as_contact
from gateway.translate.rules import (
    as_category,
    as_category_merge,
    as_graduation_proposal,
    as_graduation_status,
    as_pacing_state,
    as_risk_dial,
    as_rule,
    as_rule_revision,
)

router = APIRouter()
RUNGS = ("supervised", "auto_notify", "auto_silent")
POLICIES = ("require_review", "allow_direct", "auto_send_graduated")


async def _admin(request: Request) -> Session:
    session = await web.reader(request)
    web.require_admin(session)
    return session


async def _admin_write(request: Request) -> tuple[Session, FormData]:
    session, form = await web.writer(request)
    web.require_admin(session)
    return session, form


def _form(session: Session, action: str, inner: str, label: str) -> str:
    return (
        f'<form method="post" action="{h(action)}" class="inline-form">{csrf_field(session)}{inner}'
        f'<button type="submit">{h(label)}</button></form>'
    )


def _done(path: str, message: str) -> Response:
    return RedirectResponse(f"{path}?{urlencode({'done': message})}", status_code=303)


# A page that renders again after one of its forms was refused: ``form`` is what was posted.
View = Callable[..., Awaitable[Response]]


def _again(
    view: View, request: Request, session: Session, form: FormData
) -> Callable[[DomainError], Awaitable[Response]]:
    """A refused admin form answers its page again, saying why, with what was typed kept in that form."""
    return lambda error: view(request, session, form=form, error=error)


def _refused(error: DomainError | None) -> str:
    if error is None:
        return ""
    return (
        f'<div class="error" role="alert" data-autofocus tabindex="-1"><p>Refused: {h(error.detail)}</p>'
        "<p>Nothing was changed; what you typed is kept in its form.</p></div>"
    )


def _status(error: DomainError | None) -> int:
    return 200 if error is None else http_status(error.code)


def _form_id(name: str) -> str:
    """Names the form a post came from, so a refusal puts what was typed back into that form only."""
    return f'<input type="hidden" name="form" value="{h(name)}">'


def _notice(request: Request) -> str:
    done = request.query_params.get("done", "")
    return f'<p class="notice" role="status">{h(done.replace("_", " "))}.</p>' if done else ""


async def _categories(request: Request, session: Session) -> list[dict[str, Any]]:
    reply = await web.call(
        web.backend(request).rules.ListCategories,
        rules_pb2.ListCategoriesRequest(principal=session.principal.to_proto(), limit=200),
        request,
    )
    return [as_category(c) for c in reply.categories]


# --- rules ----------------------------------------------------------------------------------------


def _rule_view(rule: dict[str, Any], history: list[dict[str, Any]], who: web.Actors) -> dict[str, Any]:
    """A rule as its row shows it: its revisions (who made each) and the verbs its status allows."""
    verbs = (
        [("approve", "Approve"), ("reject", "Reject")]
        if rule["status"] == "proposed"
        else [("undo", "Undo last change"), ("retire", "Retire")]
    )
    revisions = [{**r, "by": who.name(r.get("changed_by_id") or "", r["changed_by_kind"])} for r in history]
    return {**rule, "history": revisions, "verbs": verbs}


@router.get("/rules")
async def rules_page(request: Request) -> Response:
    return await _rules_view(request, await _admin(request))


async def _rules_view(
    request: Request, session: Session, *, form: FormData | None = None, error: DomainError | None = None
) -> Response:
    category = request.query_params.get("category", "")
    agent = request.query_params.get("agent", "")
    backend = web.backend(request)
    categories = await _categories(request, session)
    principal = session.principal.to_proto()
    effective = await web.call(
        backend.rules.GetRules,
        rules_pb2.GetRulesRequest(principal=principal, category_id=category, agent_id=agent),
        request,
    )
    proposed = await web.call(
        backend.rules.GetRules, rules_pb2.GetRulesRequest(principal=principal, status="proposed"), request
    )
    rules = [as_rule(r) for r in effective.rules]
    waiting = [as_rule(r) for r in proposed.rules]
    history = {}
    for rule in rules + waiting:
        reply = await web.call(
            backend.rules.GetRuleHistory,
            rules_pb2.GetRuleHistoryRequest(principal=principal, lineage_id=rule["lineage_id"]),
            request,
        )
        history[rule["lineage_id"]] = [as_rule_revision(r) for r in reply.revisions]
    who = await web.actors(request, session)
    body = render(
        "rules.html",
        session=session,
        done=request.query_params.get("done", ""),
        error=error,
        categories=[(c["id"], c["name"]) for c in categories],
        category=category,
        agent=agent,
        rules=[_rule_view(r, history[r["lineage_id"]], who) for r in rules],
        waiting=[_rule_view(r, history[r["lineage_id"]], who) for r in waiting],
    )
    return page("Rules", body, session=session, active="rules", status=_status(error))


@router.post("/rules/{lineage_id}/{verb}")
async def rule_verb(request: Request, lineage_id: str, verb: str) -> Response:
    session, form = await _admin_write(request)
    rpc = {"undo": "UndoRule", "approve": "ApproveRule", "reject": "RejectRule", "retire": "RetireRule"}.get(
        verb
    )
    if rpc is None:
        raise DomainError(Code.NOT_FOUND, f"No rule verb {verb}.")
    return await web.act(
        lambda: web.call(
            getattr(web.backend(request).rules, rpc),
            rules_pb2.RuleActionRequest(
                principal=session.principal.to_proto(),
                lineage_id=lineage_id,
                expected_rev=web.number(form, "rev"),
            ),
            request,
        ),
        _done("/console/rules", f"rule_{verb}_done"),
        _again(_rules_view, request, session, form),
    )


# --- categories -----------------------------------------------------------------------------------


@router.get("/categories")
async def categories_page(request: Request) -> Response:
    return await _categories_view(request, await _admin(request))


async def _categories_view(
    request: Request, session: Session, *, form: FormData | None = None, error: DomainError | None = None
) -> Response:
    backend = web.backend(request)
    principal = session.principal.to_proto()
    rows = []
    categories = await _categories(request, session)
    names = {str(c["id"]): str(c["name"]) for c in categories}
    pacing_settings = await web.call(
        backend.rules.GetPacingSettings, rules_pb2.GetPacingSettingsRequest(principal=principal), request
    )
    for category in categories:
        status = as_graduation_status(
            await web.call(
                backend.rules.GetGraduationStatus,
                rules_pb2.GetGraduationStatusRequest(principal=principal, category_id=category["id"]),
                request,
            )
        )
        pacing = as_pacing_state(
            pacing_settings,
            await web.call(
                backend.review.GetPacingState,
                review_pb2.GetPacingStateRequest(principal=principal, category_id=category["id"]),
                request,
            ),
        )
        rows.append(
            {
                **category,
                "status": status,
                "pacing": pacing,
                "verbs": _category_verbs(category["name"], status),
                "merge": await _merge(request, session, str(category["id"]), names, form),
                "record": dial_effect.record_line(
                    await dial_effect.dial_effect(request, session, category["id"])
                ),
            }
        )
    proposals = await web.call(
        backend.rules.ListGraduationProposals,
        rules_pb2.ListGraduationProposalsRequest(principal=principal),
        request,
    )
    waiting = [
        {
            **p,
            "name": names.get(p["category_id"], str(p["category_id"])),
            "reason": web.typed(form, f"reject-{p['id']}")("reason", ""),
        }
        for p in (as_graduation_proposal(x) for x in proposals.proposals)
    ]
    body = render(
        "categories.html",
        session=session,
        done=request.query_params.get("done", ""),
        error=error,
        categories=rows,
        proposals=waiting,
        new=web.typed(form, "new-category"),
    )
    return page("Categories", body, session=session, active="categories", status=_status(error))


def _category_verbs(name: str, status: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]], str]]:
    """A category's one-button forms (path under the category, hidden fields, label): graduate to the
    next rung, demote to each lower one, and the graduation lock."""
    verbs = []
    if status.get("next_state") and not status["never_graduate"]:
        nxt = status["next_state"]
        verbs.append(("/graduate", [("to_state", nxt)], f"Graduate {name} to {nxt}"))
    for lower in RUNGS[: RUNGS.index(status["state"])] if status["state"] in RUNGS else []:
        verbs.append(("/graduate", [("to_state", lower), ("verb", "demote")], f"Demote {name} to {lower}"))
    locked = status["never_graduate"]
    verbs.append(
        (
            "/never-graduate",
            [("never_graduate", "false" if locked else "true")],
            ("Allow graduation of " if locked else "Never graduate ") + name,
        )
    )
    return verbs


async def _merge(
    request: Request, session: Session, cid: str, names: dict[str, str], form: FormData | None
) -> dict[str, Any] | None:
    """What "Merge into…" offers: the other categories (by name), what was typed, and how many of the
    category's own live rules move; None when there is no other category."""
    others = {i: n for i, n in names.items() if i != cid}
    if not others:
        return None
    rules = await web.call(
        web.backend(request).rules.GetRules,
        rules_pb2.GetRulesRequest(principal=session.principal.to_proto(), category_id=cid),
        request,
    )
    typed = web.typed(form, f"merge-{cid}")
    return {
        "others": sorted(others.items(), key=lambda x: x[1]),
        "into": typed("into_category_id", ""),
        "rationale": typed("rationale", ""),
        "own": sum(1 for r in rules.rules if r.scope == "category" and r.category_id == cid),
    }


@router.post("/categories/{category_id}/merge")
async def merge(request: Request, category_id: str) -> Response:
    session, form = await _admin_write(request)
    return await web.act(
        lambda: web.call(
            web.backend(request).rules.MergeCategories,
            rules_pb2.MergeCategoriesRequest(
                principal=session.principal.to_proto(),
                category_id=category_id,
                into_category_id=web.field(form, "into_category_id"),
                rationale=web.field(form, "rationale"),
                idempotency_key=web.field(form, "idem"),
            ),
            request,
        ),
        _merged,
        _again(_categories_view, request, session, form),
    )


async def _merged(reply: rules_pb2.MergeCategoriesResponse) -> Response:
    merged = as_category_merge(reply)
    return _done(
        "/console/categories",
        f"{merged['merged']['name']} merged into {merged['into']['name']}: {merged['rules_moved']} rules "
        f"moved, {merged['rules_retired']} retired as twins; its pending drafts moved and were nudged",
    )


@router.post("/categories/proposals/{proposal_id}/reject")
async def reject_proposal(request: Request, proposal_id: str) -> Response:
    session, form = await _admin_write(request)
    return await web.act(
        lambda: web.call(
            web.backend(request).rules.RejectGraduationProposal,
            rules_pb2.RejectGraduationProposalRequest(
                principal=session.principal.to_proto(),
                proposal_id=proposal_id,
                reason=web.field(form, "reason"),
            ),
            request,
        ),
        _done("/console/categories", "proposal_rejected"),
        _again(_categories_view, request, session, form),
    )


@router.post("/categories")
async def create_category(request: Request) -> Response:
    session, form = await _admin_write(request)
    return await web.act(
        lambda: web.call(
            web.backend(request).rules.CreateCategory,
            rules_pb2.CreateCategoryRequest(
                principal=session.principal.to_proto(),
                name=web.field(form, "name"),
                description=web.field(form, "description"),
                scope="project",
                idempotency_key=web.field(form, "idem"),
            ),
            request,
        ),
        _done("/console/categories", "category_created"),
        _again(_categories_view, request, session, form),
    )


@router.post("/categories/{category_id}/graduate")
async def graduate(request: Request, category_id: str) -> Response:
    session, form = await _admin_write(request)
    verb = "demoted" if web.field(form, "verb") == "demote" else "graduated"
    return await web.act(
        lambda: web.call(
            web.backend(request).rules.Graduate,
            rules_pb2.GraduateRequest(
                principal=session.principal.to_proto(),
                category_id=category_id,
                to_state=web.field(form, "to_state"),
            ),
            request,
        ),
        _done("/console/categories", f"category_{verb}"),
        _again(_categories_view, request, session, form),
    )


@router.post("/categories/{category_id}/never-graduate")
async def never_graduate(request: Request, category_id: str) -> Response:
    session, form = await _admin_write(request)
    return await web.act(
        lambda: web.call(
            web.backend(request).rules.UpdateCategory,
            rules_pb2.UpdateCategoryRequest(
                principal=session.principal.to_proto(),
                category_id=category_id,
                never_graduate=web.field(form, "never_graduate") == "true",
            ),
            request,
        ),
        _done("/console/categories", "graduation_lock_saved"),
        _again(_categories_view, request, session, form),
    )


# --- settings -------------------------------------------------------------------------------------


def _shown(value: object) -> str:
    return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _dial_inputs(prefix: str, values: dict[str, Any], blank: str, form: FormData | None) -> str:
    """One input per dial field, with the value the page showed (so a save sends only what changed), or
    what the admin typed when this very form was refused."""
    typed = web.typed(form, prefix)
    out = [_form_id(prefix)]
    for name in RISK_DIAL_FIELDS:
        shown = _shown(values.get(name))
        value = typed(name, shown)
        ident = f"{prefix}-{name}"
        was = f'<input type="hidden" name="was_{h(name)}" value="{h(shown)}">'
        if isinstance(getattr(rules_pb2.RiskValues(), name), bool):
            opts = "".join(
                f'<option value="{v}"{" selected" if value == v else ""}>{v or blank}</option>'
                for v in ("", "true", "false")
            )
            out.append(
                f'<label for="{ident}">{h(name)}</label><select id="{ident}" name="{h(name)}">{opts}</select>{was}'
            )
        else:
            out.append(
                f'<label for="{ident}">{h(name)}</label><input type="text" inputmode="decimal" id="{ident}" '
                f'name="{h(name)}" value="{h(value)}" placeholder="{h(blank)}">{was}'
            )
    return "".join(out)


def _dial_values(form: FormData, *, changed_only: bool) -> tuple[rules_pb2.RiskValues, list[str]]:
    """The dial fields as the form set them: a value, or blank (inherit / back to the default). The
    account merges, so it sends only the fields the reviewer changed; the others keep inheriting."""
    values, blank = rules_pb2.RiskValues(), []
    for name in RISK_DIAL_FIELDS:
        text = web.field(form, name).strip()
        if changed_only and text == web.field(form, f"was_{name}").strip():
            continue
        if not text:
            blank.append(name)
            continue
        kind = type(getattr(rules_pb2.RiskValues(), name))
        try:
            setattr(values, name, text == "true" if kind is bool else kind(text))
        except ValueError:
            raise DomainError(Code.BAD_REQUEST, f"{name} must be a {kind.__name__}, not {text!r}.") from None
    return values, blank


PACING_FIELDS = ("lookahead_window", "rework_batch_max", "nudge_min_interval_ms")


async def _pacing_section(request: Request, session: Session, form: FormData | None) -> str:
    """Backlog pacing (the risk dial's family): how a new rule's stale drafts are nudged to the agent."""
    reply = await web.call(
        web.backend(request).rules.GetPacingSettings,
        rules_pb2.GetPacingSettingsRequest(principal=session.principal.to_proto()),
        request,
    )
    typed = web.typed(form, "pacing")
    inputs = "".join(
        f'<label for="pacing-{n}">{h(n)}</label><input type="text" inputmode="numeric" id="pacing-{n}" '
        f'name="{n}" value="{h(typed(n, str(getattr(reply.values, n))))}" placeholder="default">'
        for n in PACING_FIELDS
    )
    return f"""<h2>Backlog pacing</h2>
<p>A new rule's stale drafts are nudged to the agent <code>lookahead_window</code> per category at a time, each
suggesting at most <code>rework_batch_max</code>, refills <code>nudge_min_interval_ms</code> apart (blank = default).</p>
<form method="post" action="/console/settings/pacing">{csrf_field(session)}{_form_id("pacing")}
{inputs}
<p><button type="submit">Save pacing</button></p></form>"""


def _pacing_request(session: Session, form: FormData) -> rules_pb2.SetPacingSettingsRequest:
    message = rules_pb2.SetPacingSettingsRequest(principal=session.principal.to_proto())
    for name in PACING_FIELDS:
        text = web.field(form, name).strip()
        if not text:
            message.clear.append(name)
        elif text.isdigit():
            setattr(message.values, name, int(text))
        else:
            raise DomainError(Code.BAD_REQUEST, f"{name} must be a whole number, not {text!r}.")
    return message


@router.post("/settings/pacing")
async def set_pacing(request: Request) -> Response:
    session, form = await _admin_write(request)
    return await web.act(
        lambda: web.call(
            web.backend(request).rules.SetPacingSettings, _pacing_request(session, form), request
        ),
        _done("/console/settings", "pacing_saved"),
        _again(_settings, request, session, form),
    )


@router.get("/settings")
async def settings_page(request: Request) -> Response:
    session = await _admin(request)
    return await _settings(request, session)


POLICY_LAYERS = {
    "account": "Account default (every project of the org without its own override)",
    "project": "This project's override",
}


def _policy_section(session: Session, policy: review_pb2.ReviewPolicy, form: FormData | None) -> str:
    """The org's account default beside the project's override, and which of them (or the
    require_review floor) is in force."""
    held = {"account": policy.account_default, "project": policy.project_override}
    forms = []
    for layer, label in POLICY_LAYERS.items():
        picked = web.typed(form, f"policy-{layer}")("policy", held[layer])
        options = "".join(
            f'<option value="{p}"{" selected" if p == picked else ""}>{p or "not set"}</option>'
            for p in ("", *POLICIES)
            if p or not held[layer]  # "not set" only while the layer holds nothing
        )
        forms.append(
            f'<form method="post" action="/console/settings/review-policy">{csrf_field(session)}'
            f'{_form_id(f"policy-{layer}")}<input type="hidden" name="layer" value="{layer}">'
            f'<label for="policy-{layer}">{h(label)}: <strong>{h(held[layer] or "not set")}</strong></label>'
            f'<select id="policy-{layer}" name="policy">{options}</select>'
            f"<p><button type='submit'>Save {h(label.split(' (')[0].lower())}</button></p></form>"
        )
    return f"""<h2>Review policy</h2>
<p id="policy-in-force">In force: <strong>{h(policy.policy)}</strong> (from {h(policy.source)}).
The project's override wins, then the account default, then the <code>require_review</code> floor.</p>
{"".join(forms)}"""


async def _settings(
    request: Request,
    session: Session,
    issued: str = "",
    *,
    form: FormData | None = None,
    error: DomainError | None = None,
) -> Response:
    backend = web.backend(request)
    principal = session.principal.to_proto()
    dial = as_risk_dial(
        await web.call(backend.rules.GetRiskDial, rules_pb2.GetRiskDialRequest(principal=principal), request)
    )
    policy = await web.call(
        backend.review.GetReviewPolicy, review_pb2.GetReviewPolicyRequest(principal=principal), request
    )
    categories = await _categories(request, session)
    overrides = {c["category_id"]: c for c in dial["categories"]}
    dial_rows = [
        "<tr><th scope='row'>account</th>"
        + "".join(f"<td>{h(_shown(dial['account'].get(n)) or 'default')}</td>" for n in RISK_DIAL_FIELDS)
        + "</tr>"
    ]
    for c in dial["categories"]:
        cells = "".join(
            f"<td>{h(_shown(c['effective'].get(n)))}{' (override)' if c.get(n) is not None else ' (inherited)'}</td>"
            for n in RISK_DIAL_FIELDS
        )
        dial_rows.append(f"<tr><th scope='row'>{h(c['category_id'])}</th>{cells}</tr>")
    category_forms = "".join(
        f"<details{' open' if form is not None and web.field(form, 'form') == 'dial-' + c['id'] else ''}>"
        f"<summary>Overrides for {h(c['name'])}</summary>"
        f"<form method='post' action='/console/settings/risk-dial'>{csrf_field(session)}"
        f"<input type='hidden' name='category_id' value='{h(c['id'])}'>"
        f"{_dial_inputs('dial-' + c['id'], overrides.get(c['id'], {}), 'inherit', form)}"
        f"<p><button type='submit'>Save overrides for {h(c['name'])}</button></p></form></details>"
        for c in categories
    )
    async with request.app.state.db.engine.connect() as conn:
        keys = await store.project_keys(conn, session.principal.project_id)
    key_rows = [
        f"<tr><td><code>{h(k.key_id)}</code></td><td>{h(k.actor_kind)}</td><td>{h(k.name)}</td>"
        f"<td>{h(k.created_at)}</td><td>"
        + (
            "revoked"
            if k.revoked_at
            else _form(session, f"/console/settings/api-keys/{k.key_id}/revoke", "", f"Revoke {k.key_id}")
        )
        + "</td></tr>"
        for k in keys
    ]
    listed = await web.call(
        backend.review.ListContacts, review_pb2.ListContactsRequest(principal=principal), request
    )
    contact_rows = [_contact_row(session, as_contact(c)) for c in listed.contacts]
    contact = web.typed(form, "contacts")("address", "")
    key = web.typed(form, "key")
    kinds = "".join(
        f'<option value="{k}"{" selected" if k == key("actor_kind", "") else ""}>{k}</option>'
        for k in ("human", "agent", "review_agent", "admin")
    )
    shown_once = (
        f'<div class="notice" role="status" data-autofocus tabindex="-1"><p>New key (shown once, copy it now):</p>'
        f'<p class="secret">{h(issued)}</p></div>'
        if issued
        else ""
    )
    body = f"""{_notice(request)}{_refused(error)}{shown_once}
<h2>Risk dial</h2>
{table("Values in force: the account's, and each category's effective value", ["Scope", *RISK_DIAL_FIELDS], dial_rows)}
<details open><summary>Account values (blank = built-in default)</summary>
<form method="post" action="/console/settings/risk-dial">{csrf_field(session)}
{_dial_inputs("dial-account", dial["account"], "default", form)}
<p><button type="submit">Save account values</button></p></form></details>
{category_forms}
{await _pacing_section(request, session, form)}
{_policy_section(session, policy, form)}
<h2>Blocks and suppressions</h2>
{table("Blocked and suppressed recipients", ["Address", "Blocked", "Suppressed", "Actions"], contact_rows, empty="No recipient is blocked or suppressed.")}
<form method="post" action="/console/settings/contacts">{csrf_field(session)}{_form_id("contacts")}
  <label for="contact">Address</label><input type="text" id="contact" name="address" required value="{h(contact)}">
  <p><button type="submit" name="list" value="block">Block</button>
  <button type="submit" name="list" value="suppress">Suppress</button></p></form>
<h2>API keys</h2>
{table("Keys of this project", ["Key", "Kind", "Name", "Created", ""], key_rows)}
<form method="post" action="/console/settings/api-keys">{csrf_field(session)}{_form_id("key")}
  <label for="key-kind">Kind</label><select id="key-kind" name="actor_kind">{kinds}</select>
  <label for="key-name">Name</label><input type="text" id="key-name" name="name" value="{h(key("name", ""))}">
  <label for="key-email">Email (optional: where its person is told of drafts escalated to them)</label>
  <input type="email" id="key-email" name="email" value="{h(key("email", ""))}">
  <p><button type="submit">Issue key</button></p></form>"""
    return page("Settings", body, session=session, active="settings", status=_status(error))


def _dial_request(session: Session, form: FormData) -> rules_pb2.SetRiskDialRequest:
    category_id = web.field(form, "category_id")
    values, blank = _dial_values(form, changed_only=not category_id)
    message = rules_pb2.SetRiskDialRequest(principal=session.principal.to_proto())
    if category_id:
        message.categories.append(
            rules_pb2.CategoryRisk(category_id=category_id, overrides=values, inherit_fields=blank)
        )
    else:
        message.account.CopyFrom(values)
        message.account_clear.extend(blank)
    return message


@router.post("/settings/risk-dial")
async def set_risk_dial(request: Request) -> Response:
    session, form = await _admin_write(request)
    return await web.act(
        lambda: web.call(web.backend(request).rules.SetRiskDial, _dial_request(session, form), request),
        _done("/console/settings", "risk_dial_saved"),
        _again(_settings, request, session, form),
    )


@router.post("/settings/review-policy")
async def set_review_policy(request: Request) -> Response:
    session, form = await _admin_write(request)
    account = web.field(form, "layer") == "account"
    return await web.act(
        lambda: web.call(
            web.backend(request).review.SetReviewPolicy,
            review_pb2.SetReviewPolicyRequest(
                principal=session.principal.to_proto(),
                policy=web.field(form, "policy"),
                account_default=account,
            ),
            request,
        ),
        _done("/console/settings", "account_default_saved" if account else "review_policy_saved"),
        _again(_settings, request, session, form),
    )


def _contact_row(session: Session, contact: dict[str, Any]) -> str:
    """A listed recipient: each flag with since when and by whom, and a form to lift it."""
    address = contact["address"]
    cells, verbs = [], ""
    for flag, lift in (("blocked", "Unblock"), ("suppressed", "Unsuppress")):
        if not contact[flag]:
            cells.append("<td>no</td>")
            continue
        by = contact.get(f"{flag}_by") or "unknown"
        cells.append(f"<td>since {h(contact.get(f'{flag}_at') or '?')} by <code>{h(by)}</code></td>")
        verbs += _form(
            session,
            "/console/settings/contacts/remove",
            f'<input type="hidden" name="address" value="{h(address)}">'
            f'<input type="hidden" name="list" value="{flag}">',
            f"{lift} {address}",
        )
    return f"<tr><td>{h(address)}</td>{''.join(cells)}<td>{verbs}</td></tr>"


@router.post("/settings/contacts/remove")
async def remove_contact(request: Request) -> Response:
    session, form = await _admin_write(request)
    backend = web.backend(request)
    blocked = web.field(form, "list") == "blocked"
    return await web.act(
        lambda: web.call(
            backend.review.RemoveBlock if blocked else backend.review.RemoveSuppression,
            review_pb2.ContactRequest(
                principal=session.principal.to_proto(), address=web.field(form, "address")
            ),
            request,
        ),
        _done("/console/settings", "unblocked" if blocked else "unsuppressed"),
        _again(_settings, request, session, form),
    )


@router.post("/settings/contacts")
async def add_contact(request: Request) -> Response:
    session, form = await _admin_write(request)
    backend = web.backend(request)
    rpc = backend.review.AddBlock if web.field(form, "list") == "block" else backend.review.AddSuppression
    return await web.act(
        lambda: web.call(
            rpc,
            review_pb2.ContactRequest(
                principal=session.principal.to_proto(), address=web.field(form, "address")
            ),
            request,
        ),
        _done("/console/settings", "contact_saved"),
        _again(_settings, request, session, form),
    )


@router.post("/settings/api-keys")
async def issue_key(request: Request) -> Response:
    session, form = await _admin_write(request)

    async def issue() -> str:
        try:
            kind = ActorKind(web.field(form, "actor_kind"))
        except ValueError:
            raise DomainError(Code.BAD_REQUEST, "Pick a key kind.") from None
        async with request.app.state.db.transaction() as uow:
            project = await store.get_project(uow.conn, session.principal.project_id)
            assert project is not None
            email = web.field(form, "email").strip()
            if email and not re.match(EMAIL, email):
                raise DomainError(Code.BAD_REQUEST, "The email is not one address.")
            _, secret = await store.issue_key(
                uow.conn, project, kind, web.field(form, "name") or f"console {kind}", email or None
            )
        return secret

    return await web.act(
        issue,
        lambda secret: _settings(request, session, issued=secret),
        _again(_settings, request, session, form),
    )


@router.post("/settings/api-keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str) -> Response:
    session, form = await _admin_write(request)

    async def revoke() -> None:
        async with request.app.state.db.transaction() as uow:
            key = await store.get_key(uow.conn, key_id)
            if key is None or key.project_id != session.principal.project_id:
                raise DomainError(Code.NOT_FOUND, f"No key {key_id} in this project.")
            await store.revoke_key(uow.conn, key_id)
        request.app.state.key_cache.forget(key_id)

    return await web.act(
        revoke, _done("/console/settings", "key_revoked"), _again(_settings, request, session, form)
    )


# --- budgets --------------------------------------------------------------------------------------


@router.get("/budgets")
async def budgets_page(request: Request) -> Response:
    return await _budgets_view(request, await _admin(request))


async def _budgets_view(
    request: Request, session: Session, *, form: FormData | None = None, error: DomainError | None = None
) -> Response:
    run_id = (web.field(form, "run_id") if form else request.query_params.get("run_id", "")).strip()
    budget, lookup_error = None, ""
    if run_id:
        try:
            budget = as_round_budget(
                await web.call(
                    web.backend(request).budget.GetRoundBudget,
                    budget_pb2.GetRoundBudgetRequest(principal=session.principal.to_proto(), run_id=run_id),
                    request,
                )
            )
        except web.REFUSALS as exc:
            lookup_error = web.as_domain(exc).detail
    body = render(
        "budgets.html",
        session=session,
        done=request.query_params.get("done", ""),
        error=error,
        run_id=run_id,
        budget=budget,
        lookup_error=lookup_error,
        typed=web.typed(form, "extend"),
    )
    return page("Budgets", body, session=session, active="budgets", status=_status(error))


@router.post("/budgets/extend")
async def extend(request: Request) -> Response:
    session, form = await _admin_write(request)
    run_id = web.field(form, "run_id")
    origin = budget_pb2.RequestOrigin(
        actor_kind=common_pb2.ACTOR_KIND_ADMIN,
        actor_id=session.principal.actor_id,
        key_id=session.key_id,
        remote_addr=request.client.host if request.client else "",
        user_agent=request.headers.get("user-agent", "")[:200],
    )
    query = urlencode({"run_id": run_id, "done": "extension_granted"})
    return await web.act(
        lambda: web.call(
            web.backend(request).budget.ExtendReviewBudget,
            budget_pb2.ExtendReviewBudgetRequest(
                principal=session.principal.to_proto(),
                run_id=run_id,
                head_sha=web.field(form, "head_sha"),
                new_limit=web.number(form, "new_limit"),
                expected_prior_limit=web.number(form, "expected_prior_limit"),
                scope_brief=web.field(form, "scope_brief"),
                idempotency_key=web.field(form, "idem"),
                origin=origin,
            ),
            request,
        ),
        RedirectResponse(f"/console/budgets?{query}", status_code=303),
        _again(_budgets_view, request, session, form),
    )
