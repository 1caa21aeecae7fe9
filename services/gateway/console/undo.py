"""The undo window in the console (issue 38): after an approve or edit, the toast offers Undo (a button,
and the ``z`` key) while the release waits out its window, counting down; the undo is the same
``UndoDecision`` call as ``POST /v1/reviews/{id}/undo``, and it lands back on the restored draft."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from markupsafe import Markup
from reviewloop.errors import Code, DomainError
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import UndoDecisionIn
from starlette.responses import RedirectResponse, Response

from gateway.commands import reviews as commands
from gateway.console import web
from gateway.console.html import render
from gateway.console.sessions import Session

router = APIRouter()

# What the page says after an undo (``?done=``), read out by the live region.
NOTES = {
    "undone": "Undone: the draft is back as it was before your decision, and nothing was sent.",
    "undo_late": "Too late to undo: its undo window had closed and it went to delivery.",
    "undo_refused": "Not undone: only the reviewer who released a draft may undo it, while its window is open.",
}
RELEASES = ("approve", "edit")


@dataclass(frozen=True)
class Window:
    """A release's open undo window: the (revision, version) the undo names, and when it closes."""

    review_id: str
    revision: int
    version: int
    until: datetime

    @property
    def left(self) -> int:
        """Whole seconds left (rounded up, as the countdown shows them)."""
        return max(int((self.until - datetime.now(UTC)).total_seconds() + 0.999), 0)

    @property
    def pick(self) -> str:
        """The window as one form value (``id:revision:version``), as the batch names its drafts."""
        return f"{self.review_id}:{self.revision}:{self.version}"


def open_window(review: review_pb2.Review) -> Window | None:
    """The review's undo window, if it is still open."""
    if not review.HasField("undo_until"):
        return None
    w = Window(review.id, review.revision, review.version, review.undo_until.ToDatetime(tzinfo=UTC))
    return w if w.left else None


def my_window(review: Mapping[str, Any], actor_id: str) -> Window | None:
    """The open undo window of a release this viewer made (only its decider may undo it), for the review
    page: a reviewer who navigated back can still undo."""
    until = review.get("undo_until")
    releases = [
        t for t in review.get("turns", []) if t["turn_type"] == "decision" and t.get("action") in RELEASES
    ]
    if not until or not releases or releases[-1].get("actor_id") != actor_id:
        return None
    w = Window(review["id"], review["revision"], review["version"], datetime.fromisoformat(until))
    return w if w.left else None


async def undo_toast(request: Request, session: Session) -> Markup:
    """The Undo control for the release that led to this page (``?done=approve|edit&prev=<id>``), while
    its window is open; empty otherwise. One read of that review, only after a release."""
    done, prev = request.query_params.get("done", ""), request.query_params.get("prev", "")
    if done not in RELEASES or not prev:
        return Markup()
    try:
        review = await commands.get_review(web.backend(request), session.principal, prev)
    except web.REFUSALS:
        return Markup()
    window = open_window(review)
    if window is None:
        return Markup()
    what = "approval" if done == "approve" else "edit"
    return render("undo_toast.html", session=session, what=what, w=window)


@router.post("/reviews/{review_id}/undo")
async def undo(request: Request, review_id: str) -> Response:
    session, form = await web.writer(request)

    async def refused(error: DomainError) -> Response:
        done = "undo_late" if error.code in (Code.WRONG_STATE, Code.TERMINAL) else "undo_refused"
        return RedirectResponse(f"/console/reviews/{review_id}?done={done}", status_code=303)

    return await web.act(
        lambda: commands.undo_decision(
            web.backend(request),
            session.principal,
            review_id,
            web.seen_at(form, UndoDecisionIn),
            web.field(form, "idem"),
        ),
        RedirectResponse(f"/console/reviews/{review_id}?done=undone", status_code=303),
        refused,
    )
