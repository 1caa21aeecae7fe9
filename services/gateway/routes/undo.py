"""The reviewer planes' undo (issue 38): the decider takes back an approve or edit while its release waits
out the deployment's undo window (``REVIEWLOOP_UNDO_WINDOW_S``). A route of its own, so MCP lists it as the
``undo_decision`` tool to the same keys that decide."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from reviewloop.shapes import Review, UndoDecisionIn
from reviewloop.tenancy import Principal

from gateway.commands import reviews as commands
from gateway.headers import IdempotencyKey
from gateway.responses import OrjsonResponse, ShapedRoute, encoded
from gateway.routes.reviews import REVIEWER, Backend
from gateway.translate.reviews import as_review

router = APIRouter(tags=["reviews"], route_class=ShapedRoute)


@router.post("/v1/reviews/{review_id}/undo", operation_id="undo_decision", response_model=Review)
async def undo_decision(
    review_id: str,
    body: UndoDecisionIn,
    principal: Annotated[Principal, Depends(REVIEWER)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """Undo your approve or edit before it goes out (while the review's ``undo_until`` is ahead): the draft
    is back as your decision found it, nothing is delivered, and an ``undo`` turn names you. ``409
    wrong_state`` (reason ``already_released``) once the window closed; only the decider may undo."""
    reply = await commands.undo_decision(backend, principal, review_id, body, idempotency_key)
    return encoded(as_review(reply))
