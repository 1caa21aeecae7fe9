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
from reviewloop.shapes import RISK_DIAL_FIELDS, UpdateCategoryRequest
from reviewloop.shapes.operations import EMAIL
from reviewloop.tenancy import ActorKind
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from gateway import store
from gateway.commands.rules import LineageVerb, RuleAction, lineage_verb, update_category
from gateway.console import dial_effect, web
from gateway.console.html import page, render
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


def _done(path: str, message: str) -> Response:
    return RedirectResponse(f"{path}?{urlencode({'done': message})}", status_code=303)


# A page that renders again after one of its forms was refused: ``form`` is what was posted.
View = Callable[..., Awaitable[Response]]


def _again(
    view: View, request: Request, session: Session, form: FormData
) -> Callable[[DomainError], Awaitable[Response]]:
    """A refused admin form answers its page again, saying why, with what was typed kept in that form."""
    return lambda error: view(request, session, form=form, error=error)


def _status(error: DomainError | None) -> int:
    return 200 if error is None else http_status(error.code)


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


_RULE_VERBS: dict[str, LineageVerb] = {
    "undo": "UndoRule",
    "approve": "ApproveRule",
    "reject": "RejectRule",
    "retire": "RetireRule",
}


@router.post("/rules/{lineage_id}/{verb}")
async def rule_verb(request: Request, lineage_id: str, verb: str) -> Response:
    session, form = await _admin_write(request)
    rpc = _RULE_VERBS.get(verb)
    if rpc is None:
        raise DomainError(Code.NOT_FOUND, f"No rule verb {verb}.")
    action = RuleAction(rpc, lineage_id, web.number(form, "rev"))
    return await web.act(
        lambda: lineage_verb(web.backend(request), session.principal, action),
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
        lambda: update_category(
            web.backend(request),
            session.principal,
            category_id,
            UpdateCategoryRequest(never_graduate=web.field(form, "never_graduate") == "true"),
        ),
        _done("/console/categories", "graduation_lock_saved"),
        _again(_categories_view, request, session, form),
    )


# --- settings -------------------------------------------------------------------------------------


def _shown(value: object) -> str:
    return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _dial_fields(prefix: str, values: dict[str, Any], form: FormData | None) -> list[dict[str, Any]]:
    """The dial's fields as a form shows them: the value the page showed (so a save sends only what
    changed), or what the admin typed when this very form was refused; a bool field is a select."""
    typed = web.typed(form, prefix)
    return [
        {
            "name": name,
            "shown": _shown(values.get(name)),
            "value": typed(name, _shown(values.get(name))),
            "boolean": isinstance(getattr(rules_pb2.RiskValues(), name), bool),
        }
        for name in RISK_DIAL_FIELDS
    ]


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


async def _pacing(request: Request, session: Session, form: FormData | None) -> list[tuple[str, str]]:
    """Backlog pacing's fields and the values they show."""
    reply = await web.call(
        web.backend(request).rules.GetPacingSettings,
        rules_pb2.GetPacingSettingsRequest(principal=session.principal.to_proto()),
        request,
    )
    typed = web.typed(form, "pacing")
    return [(n, typed(n, str(getattr(reply.values, n)))) for n in PACING_FIELDS]


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


def _policy_layers(policy: review_pb2.ReviewPolicy, form: FormData | None) -> list[dict[str, Any]]:
    """The org's account default beside the project's override, each with its choices ("not set" only
    while the layer holds nothing)."""
    held = {"account": policy.account_default, "project": policy.project_override}
    return [
        {
            "layer": layer,
            "label": label,
            "held": held[layer],
            "picked": web.typed(form, f"policy-{layer}")("policy", held[layer]),
            "options": [(p, p or "not set") for p in ("", *POLICIES) if p or not held[layer]],
        }
        for layer, label in POLICY_LAYERS.items()
    ]


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
    async with request.app.state.db.engine.connect() as conn:
        keys = await store.project_keys(conn, session.principal.project_id)
    listed = await web.call(
        backend.review.ListContacts, review_pb2.ListContactsRequest(principal=principal), request
    )
    body = render(
        "settings.html",
        session=session,
        done=request.query_params.get("done", ""),
        error=error,
        issued=issued,
        dial_head=["Scope", *RISK_DIAL_FIELDS],
        dial_account=[_shown(dial["account"].get(n)) for n in RISK_DIAL_FIELDS],
        dial_overrides=[
            {
                "id": c["category_id"],
                "cells": [(_shown(c["effective"].get(n)), c.get(n) is not None) for n in RISK_DIAL_FIELDS],
            }
            for c in dial["categories"]
        ],
        account_fields=_dial_fields("dial-account", dial["account"], form),
        category_forms=[
            {
                "id": c["id"],
                "name": c["name"],
                "open": form is not None and web.field(form, "form") == f"dial-{c['id']}",
                "fields": _dial_fields(f"dial-{c['id']}", overrides.get(c["id"], {}), form),
            }
            for c in categories
        ],
        pacing=await _pacing(request, session, form),
        policy=policy,
        policy_layers=_policy_layers(policy, form),
        contacts=[as_contact(c) for c in listed.contacts],
        contact=web.typed(form, "contacts")("address", ""),
        keys=keys,
        key=web.typed(form, "key"),
        key_kinds=[(k, k) for k in ("human", "agent", "review_agent", "admin")],
    )
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
