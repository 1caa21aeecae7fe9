"""Admin page "Categories": each category's graduation status, backlog pacing and dial record, its rung
(graduate, demote, the graduation lock) and "Merge into…", the agents' graduation proposals, and a new
category. Each form's verb is the command its admin REST route calls, given that route's body shape."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from reviewloop.errors import DomainError
from reviewloop.rules.v1 import rules_pb2
from reviewloop.shapes import (
    AdminCategoryIn,
    GraduateIn,
    MergeCategoriesRequest,
    RejectProposalIn,
    UpdateCategoryRequest,
)
from starlette.datastructures import FormData
from starlette.responses import Response

from gateway.commands import rules
from gateway.commands.reviews import pacing_state
from gateway.console import admin, dial_effect, web
from gateway.console.html import page, render
from gateway.console.sessions import Session
from gateway.translate.rules import (
    as_category_merge,
    as_graduation_proposal,
    as_graduation_status,
    as_pacing_state,
)

router = APIRouter()
RUNGS = ("supervised", "auto_notify", "auto_silent")
PATH = "/console/categories"


@router.get("/categories")
async def categories_page(request: Request) -> Response:
    return await _categories_view(request, await admin.reader(request))


async def _categories_view(
    request: Request, session: Session, *, form: FormData | None = None, error: DomainError | None = None
) -> Response:
    categories = await admin.categories(request, session)
    names = {str(c["id"]): str(c["name"]) for c in categories}
    settings = await rules.pacing_settings(web.backend(request), session.principal)
    rows = [await _category_row(request, session, c, names, settings, form) for c in categories]
    proposals = await rules.graduation_proposals(web.backend(request), session.principal)
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
    return page("Categories", body, session=session, active="categories", status=admin.status(error))


async def _category_row(
    request: Request,
    session: Session,
    category: dict[str, Any],
    names: dict[str, str],
    settings: rules_pb2.PacingSettings,
    form: FormData | None,
) -> dict[str, Any]:
    """A category's row: its graduation status and verbs, its pacing, "Merge into…" and dial record."""
    backend, principal, cid = web.backend(request), session.principal, str(category["id"])
    status = as_graduation_status(await rules.graduation_status(backend, principal, cid))
    return {
        **category,
        "status": status,
        "pacing": as_pacing_state(settings, await pacing_state(backend, principal, cid)),
        "verbs": _category_verbs(category["name"], status),
        "merge": await _merge(request, session, cid, names, form),
        "record": dial_effect.record_line(await dial_effect.dial_effect(request, session, cid)),
    }


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
    stack = await rules.get_rules(web.backend(request), session.principal, category_id=cid)
    typed = web.typed(form, f"merge-{cid}")
    return {
        "others": sorted(others.items(), key=lambda x: x[1]),
        "into": typed("into_category_id", ""),
        "rationale": typed("rationale", ""),
        "own": sum(1 for r in stack.rules if r.scope == "category" and r.category_id == cid),
    }


@router.post("/categories/{category_id}/merge")
async def merge(request: Request, category_id: str) -> Response:
    session, form = await admin.writer(request)

    async def work() -> rules_pb2.MergeCategoriesResponse:
        body = web.shaped(
            MergeCategoriesRequest,
            into_category_id=web.field(form, "into_category_id"),
            rationale=web.field(form, "rationale"),
        )
        idem = web.field(form, "idem")
        return await rules.merge_categories(web.backend(request), session.principal, category_id, body, idem)

    return await web.act(work, _merged, admin.again(_categories_view, request, session, form))


async def _merged(reply: rules_pb2.MergeCategoriesResponse) -> Response:
    merged = as_category_merge(reply)
    return admin.done(
        PATH,
        f"{merged['merged']['name']} merged into {merged['into']['name']}: {merged['rules_moved']} rules "
        f"moved, {merged['rules_retired']} retired as twins; its pending drafts moved and were nudged",
    )


@router.post("/categories/proposals/{proposal_id}/reject")
async def reject_proposal(request: Request, proposal_id: str) -> Response:
    session, form = await admin.writer(request)

    async def work() -> rules_pb2.GraduationProposal:
        body = web.shaped(RejectProposalIn, reason=web.field(form, "reason"))
        return await rules.reject_graduation_proposal(
            web.backend(request), session.principal, proposal_id, body
        )

    return await web.act(
        work, admin.done(PATH, "proposal_rejected"), admin.again(_categories_view, request, session, form)
    )


@router.post("/categories")
async def create_category(request: Request) -> Response:
    session, form = await admin.writer(request)

    async def work() -> rules_pb2.Category:
        body = web.shaped(
            AdminCategoryIn,
            name=web.field(form, "name"),
            description=web.field(form, "description"),
            scope="project",
        )
        idem = web.field(form, "idem")
        return await rules.create_category(web.backend(request), session.principal, body, idem)

    return await web.act(
        work, admin.done(PATH, "category_created"), admin.again(_categories_view, request, session, form)
    )


@router.post("/categories/{category_id}/graduate")
async def graduate(request: Request, category_id: str) -> Response:
    session, form = await admin.writer(request)
    verb = "demoted" if web.field(form, "verb") == "demote" else "graduated"

    async def work() -> rules_pb2.Category:
        body = web.shaped(GraduateIn, to_state=web.field(form, "to_state"))
        return await rules.graduate(web.backend(request), session.principal, category_id, body)

    return await web.act(
        work, admin.done(PATH, f"category_{verb}"), admin.again(_categories_view, request, session, form)
    )


@router.post("/categories/{category_id}/never-graduate")
async def never_graduate(request: Request, category_id: str) -> Response:
    session, form = await admin.writer(request)
    lock = web.shaped(UpdateCategoryRequest, never_graduate=web.field(form, "never_graduate") == "true")
    return await web.act(
        lambda: rules.update_category(web.backend(request), session.principal, category_id, lock),
        admin.done(PATH, "graduation_lock_saved"),
        admin.again(_categories_view, request, session, form),
    )
