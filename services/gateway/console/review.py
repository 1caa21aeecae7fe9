"""The review page and its actions (open, decide, edit preview, chat, delivery resolution, presence), and
the HTML part's sandboxed frame. Every action goes through the same command, authority and idempotency as
the JSON route of the same verb."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from reviewloop.errors import Code, DomainError
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import (
    DeliveryResolutionIn,
    MessagePreviewIn,
    OpenIn,
    PostReviewChatRequest,
    ReviewerDecisionRequest,
)
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from gateway.commands import reviews as commands
from gateway.commands import rules as rule_commands
from gateway.console import escalation, presence, queue_view, review_view, rule_proposal, web
from gateway.console.html import page, render
from gateway.console.queue_view import PAST, PENDING, get_review, summary
from gateway.console.review_view import OUTCOMES, REACHED
from gateway.console.sessions import Session
from gateway.console.undo import my_window, undo_toast
from gateway.console.warnings import hidden_html, warnings

router = APIRouter()


async def _quorum(request: Request, session: Session, review: dict[str, Any]) -> dict[str, Any] | None:
    """Where a pending draft of a category with a quorum stands: "2 of 3 approvals (panel of 4)" and who
    gave them, by key name where the project has one. Only approvals of the current revision count (an
    edit starts the count again)."""
    category = review.get("category_id")
    if not category or review["state"] not in PENDING:
        return None
    dial = await rule_commands.risk_dial(web.backend(request), session.principal, category)
    values = next((c.effective for c in dial.categories if c.category_id == category), dial.account)
    if values.quorum_approvals <= 1:
        return None
    names = await web.actors(request, session)
    return {
        "given": [names.name(a) for a in review["approvers"]],
        "needed": values.quorum_approvals,
        "panel": values.quorum_panel,
        "mine": session.principal.actor_id in review["approvers"],
    }


async def _preview(
    request: Request,
    session: Session,
    review_id: str,
    edit: dict[str, str | None] | None = None,
) -> review_pb2.MessagePreview:
    """The exact message an approval (of ``edit``, when given) delivers, and its approval digest."""
    asked = web.shaped(MessagePreviewIn, **edit) if edit else None
    return await commands.preview_message(web.backend(request), session.principal, review_id, asked)


async def _revisions(request: Request, session: Session, review_id: str) -> dict[int, dict[str, str]]:
    """Each kept revision's content as the lines its per-field diff compares, by revision number."""
    reply = await commands.revisions(web.backend(request), session.principal, review_id)
    return {
        r.revision: {
            "subject": r.subject,
            "to": "\n".join(r.to),
            "cc": "\n".join(r.cc),
            "bcc": "\n".join(r.bcc),
            "body_text": r.body_text,
            "body_html": r.body_html,
            "attachments": "\n".join(
                f"{a.filename} ({a.size} bytes, sha256 {a.sha256})" for a in r.attachments
            ),
        }
        for r in reply.revisions
    }


async def render_review(
    request: Request,
    session: Session,
    review: dict[str, Any],
    *,
    typed: FormData | None = None,
    refusal: dict[str, Any] | None = None,
    status: int = 200,
) -> Response:
    """The review page: the draft as an approval delivers it, its history, and the actions its state
    allows (``typed``: what the reviewer typed into a refused form, kept)."""
    rid, state = review["id"], review["state"]
    preview, who = await asyncio.gather(_preview(request, session, rid), web.actors(request, session))
    # One listing serves previous/next and the rule's reach (not the pending queue twice).
    reached = await queue_view.listed(request, session, queue_view.query(REACHED))
    previous, following = review_view.neighbours(rid, reached)
    names = await queue_view.category_names(request, session)
    category_name = names.get(review.get("category_id") or "", review.get("category_id") or "no category")
    others = await presence.touch(request, session, rid)
    hold = None
    if state in PENDING:
        hold = (await queue_view.held_by_rule(request, session, {review.get("category_id") or ""})).get(rid)
    deciding = state in ("in_review", "chatting")
    body = render(
        "review.html",
        session=session,
        review=review,
        typed=lambda name, default="": web.field(typed, name, default) if typed else default,
        category_name=category_name,
        previous=previous,
        next=following,
        presence=presence.others_text(others),
        presence_every=presence.REFRESH_S,
        refusal=refusal,
        hold=review_view.hold(hold),
        quorum=await _quorum(request, session, review),
        sha256=preview.message_sha256,
        raw_mime=preview.raw_mime.decode("utf-8", "replace"),
        scopes=review_view.rule_scopes(review, session, category_name, reached) if deciding else [],
        escalate_to=await escalation.targets(request, session) if deciding else [],
        deliverable=state in (*PENDING, "approved"),
        history=review_view.history(request, await _revisions(request, session, rid)),
        undo=my_window(review, session.principal.actor_id),
        **review_view.shown(review, who),
    )
    return page(
        summary(review),
        body,
        session=session,
        active="queue",
        status=status,
        announce=await queue_view.announcement(request, session),
        toast=await undo_toast(request, session),
    )


@router.get("/reviews/{review_id}")
async def review_page(request: Request, review_id: str) -> Response:
    session = await web.reader(request)
    return await render_review(request, session, await get_review(request, session, review_id))


def _refusal(
    request: Request, session: Session, review_id: str, form: FormData
) -> Callable[[DomainError], Awaitable[Response]]:
    """What a refused review action answers: the review page again (``_refused``)."""
    return lambda error: _refused(request, session, review_id, form, error)


async def _refused(
    request: Request, session: Session, review_id: str, form: FormData, error: DomainError
) -> Response:
    """A refused action changes nothing: show why, what changed since the page was read, and the current
    version, keeping what the reviewer typed."""
    review = await get_review(request, session, review_id)
    seen = int(web.field(form, "seen_seq", "0") or 0)
    since = [t for t in review.get("turns") or [] if t["seq"] > seen]
    who = await web.actors(request, session)
    changes = [
        t["turn_type"]
        + (f" ({t['action']})" if t.get("action") else "")
        + f" by {who.name(t.get('actor_id', ''), t['actor_kind'])}"
        for t in since
    ]
    shown = f"revision {web.field(form, 'revision')}, version {web.field(form, 'version')}"
    now = f"revision {review['revision']}, version {review['version']}, state {review['state']}"
    conflict = error.code in (Code.STALE, Code.WRONG_STATE, Code.TERMINAL, Code.CONFLICT)
    # "Changed since you loaded it" only when it did: a verb the draft's state never allows is its own refusal.
    moved = bool(since) or shown != f"revision {review['revision']}, version {review['version']}"
    stale = conflict and moved
    headline = (
        f"Refused: this draft changed since you loaded it. You saw {shown}; it is now {now}. Nothing was done."
        if stale
        else f"Refused: {error.detail}"
    )
    if ("reason", "message_changed") in error.hints:
        headline = f"Refused: {error.detail}"
    return await render_review(
        request,
        session,
        review,
        typed=form,
        refusal={"headline": headline, "changes": changes, "stale": stale},
        status=409 if conflict else 422,
    )


async def _after_decision(request: Request, session: Session, review_id: str, done: str) -> Response:
    """Focus moves to the next draft (oldest first), or back to the queue when none is left."""
    queue = [r["id"] for r in await queue_view.pending_oldest_first(request, session) if r["id"] != review_id]
    query = urlencode({"done": done, "prev": review_id})
    target = f"/console/reviews/{queue[0]}?{query}" if queue else f"/console/queue?{query}"
    return RedirectResponse(target, status_code=303)


@router.post("/reviews/{review_id}/open")
async def open_review(request: Request, review_id: str) -> Response:
    session, form = await web.writer(request)
    return await web.act(
        lambda: commands.open_review(
            web.backend(request),
            session.principal,
            review_id,
            web.seen_at(form, OpenIn),
            web.field(form, "idem"),
        ),
        RedirectResponse(f"/console/reviews/{review_id}?done=open", status_code=303),
        _refusal(request, session, review_id, form),
    )


@router.post("/reviews/{review_id}/decide")
async def decide(request: Request, review_id: str) -> Response:
    session, form = await web.writer(request)
    action = web.field(form, "action")

    async def work() -> Any:
        return await commands.decide(
            request,
            web.backend(request),
            session.principal,
            review_id,
            _decision(form),
            web.field(form, "idem"),
        )

    return await web.act(
        work,
        lambda _: _after_decision(request, session, review_id, action),
        _refusal(request, session, review_id, form),
    )


def _decision(form: FormData) -> ReviewerDecisionRequest:
    """The decide form as the decision's shape (the REST body)."""
    action = web.field(form, "action")
    if action not in PAST:
        raise DomainError(Code.BAD_REQUEST, "Pick an action.")
    fields: dict[str, Any] = {
        "action": action,
        "revision": web.number(form, "revision"),
        "version": web.number(form, "version"),
        "feedback": web.field(form, "feedback"),
    }
    if action in ("approve", "edit"):
        fields["message_sha256"] = web.field(form, "message_sha256") or None
    if action == "approve":
        fields["override_held"] = web.field(form, "override_held") == "yes"
    if action == "escalate":
        fields.update(escalation.chosen_target(form))
    if action == "edit":
        edit = _edit_of(form)
        fields.update(subject=edit["subject"] or "", body=edit["body"] or "", body_html=edit["body_html"])
        rule_text = web.field(form, "rule_text").strip()
        if rule_text:
            # review_state scopes a category rule to the review's own category, and checks that a
            # per-agent rule names the review's own agent, in the decision's unit; the rules context
            # refuses house style to anyone but an admin.
            scope = web.field(form, "rule_scope")
            fields["new_rule"] = {
                "rule_text": rule_text,
                "scope": "category" if scope == "category" else "general",
                "rule_layer": "org" if scope == "house" else "project",
                "scope_agent_id": web.field(form, "rule_agent") if scope == "agent" else None,
            }
    return web.shaped(ReviewerDecisionRequest, **fields)


def _edit_of(form: FormData) -> dict[str, str | None]:
    """The edit a form names: subject, text and (when the reviewer edits it) the HTML part; None for
    the HTML part regenerates it from the text."""
    own_html = web.field(form, "html_mode") == "edit"
    return {
        "subject": web.field(form, "subject"),
        "body": web.field(form, "body").replace("\r\n", "\n"),
        "body_html": web.field(form, "body_html").replace("\r\n", "\n") if own_html else None,
    }


# The rule text and scope are the save-as-rule panel's own inputs in the same form (``rule_proposal``).
_CARRIED = ("subject", "body", "body_html", "html_mode", "feedback", "rule_agent")


@router.post("/reviews/{review_id}/edit-preview")
async def edit_preview(request: Request, review_id: str) -> Response:
    """The exact message the edit would send, every part diffed against what the agent wrote and its
    warnings, with its digest: "Save edit and approve" names that digest."""
    session, form = await web.writer(request)
    if web.field(form, "back"):
        return await render_review(
            request, session, await get_review(request, session, review_id), typed=form
        )
    review, edited = await asyncio.gather(
        get_review(request, session, review_id), _preview(request, session, review_id, _edit_of(form))
    )
    before = {
        "subject": review["subject"],
        "body_text": review["body_text"],
        "body_html": review.get("body_html") or "",
    }
    after = {"subject": edited.subject, "body_text": edited.body_text, "body_html": edited.body_html}
    rule_panel = await rule_proposal.section(request, session, review, form, _edit_of(form))
    body = render(
        "edit_preview.html",
        session=session,
        review=review,
        warnings=warnings({**review, **after}),
        regenerated=edited.html_regenerated,
        compare=review_view.compare(before, after),
        carried=[
            (name, web.field(form, name))
            for name in (*_CARRIED, "revision", "version", "seen_seq", "idem", "csrf")
        ],
        sha256=edited.message_sha256,
        rule_panel=rule_panel,
        raw_mime=edited.raw_mime.decode("utf-8", "replace"),
        body_text=edited.body_text,
        body_html=edited.body_html,
        hidden=hidden_html(edited.body_html) if edited.body_html else [],
    )
    return page(f"Review your edit: {summary(review)}", body, session=session, active="queue")


@router.get("/reviews/{review_id}/html-part")
async def html_part(request: Request, review_id: str) -> Response:
    """The draft's HTML part as its own document, for the review page's sandboxed frame: its CSP lets
    inline styles render (a mail client renders them) and loads nothing remote."""
    session = await web.reader(request)
    review = await get_review(request, session, review_id)
    return _frame_document(review.get("body_html") or "")


@router.post("/reviews/{review_id}/html-part")
async def html_part_of_edit(request: Request, review_id: str) -> Response:
    """An edit's HTML part (as PreviewMessage answered it) in the same frame document."""
    _, form = await web.writer(request)
    return _frame_document(web.field(form, "body_html"))


# The HTML part's own frame: inline styles and <style> render as a mail client renders them; nothing
# remote loads, no script runs (the frame is sandboxed without allow-scripts, and so is this document).
FRAME_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'self'; sandbox"
)


def _frame_document(body_html: str) -> Response:
    return Response(
        body_html,
        media_type="text/html; charset=utf-8",
        headers={
            "Content-Security-Policy": FRAME_CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store",
        },
    )


@router.post("/reviews/{review_id}/chat")
async def chat(request: Request, review_id: str) -> Response:
    session, form = await web.writer(request)
    text = web.field(form, "text")
    return await web.act(
        lambda: commands.post_chat(
            web.backend(request),
            session.principal,
            review_id,
            web.shaped(PostReviewChatRequest, text=text),
            web.field(form, "idem"),
        ),
        RedirectResponse(f"/console/reviews/{review_id}", status_code=303),
        _refusal(request, session, review_id, form),
    )


@router.post("/reviews/{review_id}/delivery-resolution")
async def resolve_delivery(request: Request, review_id: str) -> Response:
    """An admin closes a parked send as delivered or failed, with the reason (never a resend)."""
    session, form = await web.writer(request)

    async def resolve() -> None:
        outcome, reason = web.field(form, "outcome"), web.field(form, "reason").strip()
        web.require_admin(session)
        if outcome not in OUTCOMES or not reason:
            raise DomainError(
                Code.BAD_REQUEST, "Pick delivered or failed and give the reason (the evidence)."
            )
        evidence = web.shaped(DeliveryResolutionIn, outcome=outcome, reason=reason)
        await commands.resolve_delivery(web.backend(request), session.principal, review_id, evidence)

    return await web.act(
        resolve,
        RedirectResponse(f"/console/reviews/{review_id}?done=resolved", status_code=303),
        _refusal(request, session, review_id, form),
    )


@router.post("/reviews/{review_id}/presence")
async def review_presence(request: Request, review_id: str) -> Response:
    return await presence.refresh(request, review_id)
