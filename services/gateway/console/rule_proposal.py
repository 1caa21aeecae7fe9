"""Save-as-rule on the edit's preview page (issue 38): before anything is saved, the words the edit
changed, the rule text they suggest, the rules it may conflict with and the other pending drafts it would
hold (named by intent). The panel runs the REST route's own command (``routes.rule_preview``) and sits
inside the "Save edit and approve" form, so the rule the reviewer checked is the one the decision saves."""

from __future__ import annotations

from typing import Any, Literal, cast

from fastapi import Request
from markupsafe import Markup
from reviewloop.shapes import RulePreviewIn
from starlette.datastructures import FormData

from gateway.console import web
from gateway.console.html import render
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


def _scopes(scope: str, review: dict[str, Any], session: Session) -> list[tuple[str, str, bool]]:
    """The scope choices (value, label, unavailable): a draft's own category and agent only."""
    return [
        (value, label, value == "house" and not session.is_admin and value != scope)
        for value, label in SCOPES.items()
        if not (value == "category" and not review.get("category_id"))
        and not (value == "agent" and not review.get("agent_id"))
    ]


async def section(
    request: Request, session: Session, review: dict[str, Any], form: FormData, edit: dict[str, Any]
) -> Markup:
    """The panel for the edit ``edit`` of ``review``: what the reviewer typed in ``form`` (the rule text,
    its scope) is kept; "Use the proposed rule" fills the text with the proposal."""
    scope = _scope(form, review, session)
    typed = web.field(form, "rule_text").strip()
    view = {
        "scope": scope,
        "scopes": _scopes(scope, review, session),
        "fields": FIELDS,
        "kinds": KINDS,
        "again": f"/console/reviews/{review['id']}/edit-preview",
    }
    try:
        found = await preview_rule(
            web.backend(request),
            session.principal,
            review["id"],
            RulePreviewIn(subject=edit["subject"], body=edit["body"], rule_text=typed, scope=scope),
        )
    except web.REFUSALS as exc:
        return render("rule_proposal.html", **view, refused=web.as_domain(exc).detail, typed=typed)
    if web.field(form, "use_proposal") and found["proposed_text"]:
        typed = found["proposed_text"]
    checked = "the rule you typed" if web.field(form, "rule_text").strip() else "the proposed rule"
    return render("rule_proposal.html", **view, refused="", found=found, typed=typed, checked=checked)
