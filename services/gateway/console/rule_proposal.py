"""Save-as-rule on the edit's preview page (issue 38): before anything is saved, the words the edit
changed, the rule text they suggest, the rules it may conflict with and the other pending drafts it would
hold (named by intent). The panel runs the REST route's own command (``routes.rule_preview``) and sits
inside the "Save edit and approve" form, so the rule the reviewer checked is the one the decision saves."""

from __future__ import annotations

from typing import Any, Literal, cast

from fastapi import Request
from reviewloop.shapes import RulePreviewIn
from starlette.datastructures import FormData

from gateway.console import web
from gateway.console.html import h
from gateway.console.sessions import Session
from gateway.routes.rule_preview import preview_rule

SCOPES = {
    "house": "house style: every project of the org",
    "general": "general: every draft of this project",
    "category": "this draft's category",
    "agent": "this draft's agent only",
}
KINDS = {
    "duplicate": "says the same (saving would be refused: revise that rule instead)",
    "contradiction": "may contradict it",
    "overlap": "may say the same thing",
}
FIELDS = {"subject": "Subject", "body_text": "Text"}


Scope = Literal["house", "general", "category", "agent"]


def _scope(form: FormData, review: dict[str, Any], session: Session) -> Scope:
    """The scope the reviewer picked (a non-admin's house style too: the service refuses it, visibly), or
    general when the draft has no such scope."""
    scope = cast(Scope, web.field(form, "rule_scope", "general"))
    if scope not in SCOPES:
        return "general"
    if (scope == "category" and not review.get("category_id")) or (
        scope == "agent" and not review.get("agent_id")
    ):
        return "general"
    return scope


def _radios(scope: str, review: dict[str, Any], session: Session) -> str:
    out = []
    for value, label in SCOPES.items():
        if value == "category" and not review.get("category_id"):
            continue
        if value == "agent" and not review.get("agent_id"):
            continue
        unavailable = value == "house" and not session.is_admin and value != scope
        out.append(
            f'<label class="check"><input type="radio" name="rule_scope" value="{value}" id="proposal-scope-{value}"'
            f"{' checked' if value == scope else ''}{' disabled' if unavailable else ''}> {h(label)}"
            f"{' (only an admin sets house style)' if unavailable else ''}</label>"
        )
    return "".join(out)


def _change(change: dict[str, Any]) -> str:
    before, after = " ".join(change["before"].split()), " ".join(change["after"].split())
    what = {
        "replace": f"<del>{h(before)}</del> → <ins>{h(after)}</ins>",
        "insert": f"added <ins>{h(after)}</ins>",
        "delete": f"removed <del>{h(before)}</del>",
    }[change["op"]]
    return f"<li>{FIELDS[change['field']]}: {what}</li>"


async def section(
    request: Request, session: Session, review: dict[str, Any], form: FormData, edit: dict[str, Any]
) -> str:
    """The panel for the edit ``edit`` of ``review``: what the reviewer typed in ``form`` (the rule text,
    its scope) is kept; "Use the proposed rule" fills the text with the proposal."""
    scope = _scope(form, review, session)
    typed = web.field(form, "rule_text").strip()
    try:
        found = await preview_rule(
            web.backend(request),
            session.principal,
            review["id"],
            RulePreviewIn(subject=edit["subject"], body=edit["body"], rule_text=typed, scope=scope),
        )
    except web.REFUSALS as exc:
        return f"""<fieldset id="rule-proposal"><legend>Save as rule (optional)</legend>
  <p class="error">This rule would be refused: {h(web.as_domain(exc).detail)}</p>
  <label for="proposal-rule-text">Rule the agent applies next time (leave empty to save no rule)</label>
  <textarea id="proposal-rule-text" name="rule_text">{h(typed)}</textarea>
  <p id="proposal-scope-label">Who the rule applies to:</p>
  <div role="radiogroup" aria-labelledby="proposal-scope-label">{_radios(scope, review, session)}</div>
</fieldset>"""
    if web.field(form, "use_proposal") and found["proposed_text"]:
        typed = found["proposed_text"]
    changes = "".join(_change(c) for c in found["changes"])
    proposed = (
        f'<p id="rule-proposed">Proposed from your edit: <q>{h(found["proposed_text"])}</q></p>'
        if found["proposed_text"]
        else '<p id="rule-proposed">Your edit changed no word, so it suggests no rule.</p>'
    )
    checked = "the rule you typed" if web.field(form, "rule_text").strip() else "the proposed rule"
    conflicts = (
        "<ul>"
        + "".join(
            f"<li><q>{h(c['rule']['rule_text'])}</q> ({h(c['rule']['scope'])} rule, rev {c['rule']['rev']}): "
            f"{h(KINDS[c['kind']])}</li>"
            for c in found["conflicts"]
        )
        + "</ul>"
        if found["conflicts"]
        else "<p>No rule of the same scope says the like.</p>"
    )
    held = (
        f"<p>Saving it holds {found['held_count']} other pending draft{'s' if found['held_count'] != 1 else ''} "
        "of its reach until their agent re-applies the rules; a reviewer can still approve one as it stands:</p><ul>"
        + "".join(
            f'<li><a href="/console/reviews/{h(d["review_id"])}">{h(d["summary"])}</a> ({h(d["state"])})</li>'
            for d in found["held"]
        )
        + "</ul>"
        if found["held_count"]
        else "<p>Saving it holds no other pending draft.</p>"
    )
    again = f"/console/reviews/{h(review['id'])}/edit-preview"
    return f"""<fieldset id="rule-proposal"><legend>Save as rule (optional)</legend>
  <p>Your edit changed these words:</p>{f"<ul>{changes}</ul>" if changes else "<p>No word.</p>"}
  {proposed}
  <label for="proposal-rule-text">Rule the agent applies next time (leave empty to save no rule)</label>
  <textarea id="proposal-rule-text" name="rule_text">{h(typed)}</textarea>
  <p id="proposal-scope-label">Who the rule applies to:</p>
  <div role="radiogroup" aria-labelledby="proposal-scope-label">{_radios(scope, review, session)}</div>
  <p><button type="submit" name="use_proposal" value="1" formaction="{again}">Use the proposed rule</button>
  <button type="submit" name="check_rule" value="1" formaction="{again}">Check the rule</button></p>
  <section aria-labelledby="rule-conflicts-h" id="rule-conflicts"><h3 id="rule-conflicts-h">Rules {checked} may conflict with</h3>{conflicts}</section>
  <section aria-labelledby="rule-held-h" id="rule-held"><h3 id="rule-held-h">Drafts it would hold</h3>{held}</section>
</fieldset>"""
