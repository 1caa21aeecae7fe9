"""Admin page "Rules": the effective ladder with each rule's history, the rules proposed under staged
approval, and a lineage's undo / approve / reject / retire (the commands the admin rule routes call)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from reviewloop.errors import Code, DomainError
from starlette.datastructures import FormData
from starlette.responses import Response

from gateway.commands.rules import LineageVerb, RuleAction, get_rules, lineage_verb, rule_history
from gateway.console import admin, web
from gateway.console.html import page, render
from gateway.console.sessions import Session
from gateway.translate.rules import as_rule, as_rule_revision

router = APIRouter()


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
    return await _rules_view(request, await admin.reader(request))


async def _rules_view(
    request: Request, session: Session, *, form: FormData | None = None, error: DomainError | None = None
) -> Response:
    category = request.query_params.get("category", "")
    agent = request.query_params.get("agent", "")
    backend, principal = web.backend(request), session.principal
    categories = await admin.categories(request, session)
    effective = await get_rules(backend, principal, category_id=category, agent_id=agent)
    proposed = await get_rules(backend, principal, status="proposed")
    rules = [as_rule(r) for r in effective.rules]
    waiting = [as_rule(r) for r in proposed.rules]
    history = {}
    for rule in rules + waiting:
        reply = await rule_history(backend, principal, rule["lineage_id"])
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
    return page("Rules", body, session=session, active="rules", status=admin.status(error))


_RULE_VERBS: dict[str, LineageVerb] = {
    "undo": "UndoRule",
    "approve": "ApproveRule",
    "reject": "RejectRule",
    "retire": "RetireRule",
}


@router.post("/rules/{lineage_id}/{verb}")
async def rule_verb(request: Request, lineage_id: str, verb: str) -> Response:
    session, form = await admin.writer(request)
    rpc = _RULE_VERBS.get(verb)
    if rpc is None:
        raise DomainError(Code.NOT_FOUND, f"No rule verb {verb}.")
    action = RuleAction(rpc, lineage_id, web.number(form, "rev"))
    return await web.act(
        lambda: lineage_verb(web.backend(request), session.principal, action),
        admin.done("/console/rules", f"rule_{verb}_done"),
        admin.again(_rules_view, request, session, form),
    )
