"""Batch decisions from the queue: approve or reject the selected drafts, each on its own compare-and-set
with its own result line, and undo a batch's approvals line by line or all at once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import OpenIn, ReviewerDecisionRequest, UndoDecisionIn
from starlette.responses import Response

from gateway.commands import reviews as commands
from gateway.console import queue_view, web
from gateway.console.html import page, render
from gateway.console.queue_view import PAST, PENDING, summary
from gateway.console.sessions import Session
from gateway.console.undo import Window, open_window
from gateway.console.warnings import warnings
from gateway.translate.reviews import as_review

router = APIRouter()

BATCH_MAX = 50


@dataclass(frozen=True)
class Line:
    """One result line of a batch, and its approval's undo window while open. ``draft`` names the draft as
    the line does, so each line's Undo is named for its own draft (a screen reader lists them apart)."""

    text: str
    window: Window | None = None
    draft: str = ""


def _named(review: dict[str, Any]) -> str:
    """A draft as a line names it: its intent, then its id."""
    return f"“{summary(review)}” ({review['id']})"


@router.post("/batch")
async def batch(request: Request) -> Response:
    """Decide the drafts selected in the queue, each on its own compare-and-set (the revision and version
    the queue showed), each with its own result line. A batch approves no draft whose warnings the queue
    did not show in full, nor one a rule holds: those are refused with a line saying to open them."""
    session, form = await web.writer(request)
    action = web.field(form, "action")
    reason = web.field(form, "feedback").strip()
    picks = [str(v) for v in form.getlist("pick")][:BATCH_MAX]
    lines: list[Line] = []
    if action not in ("approve", "reject"):
        lines.append(Line("Nothing was done: pick approve or reject."))
    elif action == "reject" and not reason:
        lines.append(Line("Nothing was done: a reject needs a reason, which the agent of each draft gets."))
    elif not picks:
        lines.append(Line("Nothing was done: select at least one draft."))
    else:
        listed = await queue_view.listed(request, session, queue_view.query(PENDING))
        pending = {r["id"]: r for r in listed}
        held = await queue_view.held_by_rule(
            request,
            session,
            {r.get("category_id") or "" for r in pending.values()} if action == "approve" else set(),
        )
        for pick in picks:
            lines.append(await _batch_one(request, session, pick, action, reason, pending, held))
    return _batch_page(session, lines)


def _batch_page(session: Session, lines: list[Line]) -> Response:
    """A batch's result lines, each approval with its own Undo while its window is open."""
    return page(
        "Batch decision",
        render(
            "batch.html",
            session=session,
            lines=lines,
            last=max((line.window.until for line in lines if line.window), default=None),
        ),
        session=session,
        active="queue",
        announce=f"{len(lines)} results",
    )


@router.post("/batch/undo")
async def batch_undo(request: Request) -> Response:
    """Undo one line of a batch (``undo=<id:revision:version>``) or every line still open (``undo=all``),
    each its own ``UndoDecision`` and result line; the lines not undone keep their Undo."""
    session, form = await web.writer(request)
    chosen = web.field(form, "undo")
    backend, principal = web.backend(request), session.principal
    lines: list[Line] = []
    for pick in [str(v) for v in form.getlist("open")][:BATCH_MAX]:
        rid, _, seen = pick.partition(":")
        revision_s, _, version_s = seen.partition(":")
        if not revision_s.isdigit() or not version_s.isdigit():
            continue
        try:
            if chosen not in ("all", pick):
                kept = await commands.get_review(backend, principal, rid)
                name = _named(as_review(kept))
                lines.append(Line(f"{name}: approved.", open_window(kept), name))
                continue
            seen_at = web.shaped(UndoDecisionIn, revision=int(revision_s), version=int(version_s))
            undone = await commands.undo_decision(backend, principal, rid, seen_at, web.idempotency_key())
            lines.append(Line(f"{_named(as_review(undone))}: undone; nothing was sent."))
        except web.REFUSALS as exc:
            lines.append(Line(f"{rid}: not undone: {web.as_domain(exc).detail}"))
    return _batch_page(session, lines or [Line("Nothing was undone: no line of the batch was still open.")])


async def _batch_one(
    request: Request,
    session: Session,
    pick: str,
    action: str,
    reason: str,
    pending: Mapping[str, dict[str, Any]],
    held: Mapping[str, Any],
) -> Line:
    """One draft of a batch: its own compare-and-set on what the queue showed, and its result line (with
    the approval's undo window, while open)."""
    rid, _, seen = pick.partition(":")
    revision_s, _, version_s = seen.partition(":")
    review = pending.get(rid)
    if review is None or not revision_s.isdigit() or not version_s.isdigit():
        return Line(f"{rid}: not decided: it is no longer pending.")
    name = _named(review)
    if action == "approve":
        found = warnings(review)
        if found:
            return Line(
                f"{name}: not approved: it has {len(found)} warning{'' if len(found) == 1 else 's'} a batch "
                "does not show. Open it to read them and decide."
            )
        if rid in held:
            return Line(f"{name}: not approved: a rule holds it. Open it to approve it as it stands.")
    revision, version = int(revision_s), int(version_s)
    backend, principal = web.backend(request), session.principal
    try:
        if review["state"] == "needs_review":  # picked up first, on the version the queue showed
            seen_at = web.shaped(OpenIn, revision=revision, version=version)
            opened = await commands.open_review(backend, principal, rid, seen_at, web.idempotency_key())
            revision, version = opened.revision, opened.version
        decision = web.shaped(
            ReviewerDecisionRequest,
            action=action,
            revision=revision,
            version=version,
            feedback=reason if action == "reject" else "",
        )
        decided = await commands.decide(request, backend, principal, rid, decision, web.idempotency_key())
    except web.REFUSALS as exc:
        return Line(f"{name}: not {PAST[action].lower()}: {web.as_domain(exc).detail}")
    window = open_window(decided) if isinstance(decided, review_pb2.Review) else None
    return Line(f"{name}: {PAST[action].lower()}.", window, name)
