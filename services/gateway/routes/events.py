"""The nudge routes: list_review_events, wait_for_review_event and ack_review_events (spec 000, "Nudge")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from reviewloop import eventcursor
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.shapes import AckReviewEventRequest, AckReviewEventResult, ReviewEventsResult
from reviewloop.tenancy import Principal

from gateway.auth import ANY_PROJECT_KEY
from gateway.backends import Backends, backends
from gateway.responses import OrjsonResponse, ShapedRoute, encoded
from gateway.translate import Json
from gateway.translate.events import as_cursors, as_review_event

router = APIRouter(tags=["review events"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
Caller = Annotated[Principal, Depends(ANY_PROJECT_KEY)]


ReviewFilter = Annotated[
    str, Query(max_length=40, description="only this review's nudges (no broadcasts), with its cursor")
]


@router.get("/v1/review-events", operation_id="list_review_events", response_model=ReviewEventsResult)
async def list_review_events(
    principal: Caller,
    backend: Backend,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str, Query(max_length=64, pattern=eventcursor.PATTERN)] = "",
    review_id: ReviewFilter = "",
) -> OrjsonResponse:
    """The caller's un-acked nudges across its reviews, and its un-acked broadcasts (`seq` 0, no
    `review_id`: project-wide changes), oldest first, a page at a time (`next_cursor`). An acked nudge
    never re-surfaces. `cursors` holds the ack frontier (`last_acked_seq`) of each review on the page,
    and of `review_id` when the drain is filtered to it."""
    reply = await backend.nudge.ListEvents(
        nudge_pb2.ListEventsRequest(
            principal=principal.to_proto(), limit=limit, cursor=cursor, review_id=review_id
        ),
        timeout=backend.timeout_s,
    )
    return encoded(
        {
            "events": [as_review_event(n) for n in reply.events],
            "next_cursor": reply.next_cursor or None,
            "cursors": as_cursors(reply.cursors),
        }
    )


WAIT_MIN_S, WAIT_MAX_S = 1.0, 55.0


@router.get("/v1/review-events/wait", operation_id="wait_for_review_event", response_model=ReviewEventsResult)
async def wait_for_review_event(
    principal: Caller,
    backend: Backend,
    timeout_s: Annotated[float, Query(allow_inf_nan=False, description="Clamped to 1..55 s.")] = 30,
    wait_seconds: Annotated[
        float | None, Query(allow_inf_nan=False, description="the SDK's name for `timeout_s`")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    review_id: ReviewFilter = "",
) -> OrjsonResponse:
    """Long-poll: answers as soon as one of the caller's nudges (or broadcasts) is un-acked and visible,
    or with `{"events": []}` after `timeout_s`, clamped to 1..55 s (NOTES.md: a longer wait is cut, not
    refused). `review_id` waits for that review's nudges only; `cursors` as on the drain."""
    timeout_s = min(max(timeout_s if wait_seconds is None else wait_seconds, WAIT_MIN_S), WAIT_MAX_S)
    reply = await backend.nudge.WaitForEvents(
        nudge_pb2.WaitForEventsRequest(
            principal=principal.to_proto(), timeout_s=timeout_s, limit=limit, review_id=review_id
        ),
        timeout=timeout_s + backend.timeout_s,
    )
    return encoded(
        {"events": [as_review_event(n) for n in reply.events], "cursors": as_cursors(reply.cursors)}
    )


@router.post("/v1/review-events/ack", operation_id="ack_review_events", response_model=AckReviewEventResult)
async def ack_review_events(body: AckReviewEventRequest, principal: Caller, backend: Backend) -> Json:
    """Advance each review's ack cursor to `through_seq` (or `seq`): idempotent, never backwards; and
    mark each broadcast of `broadcast_ids` done, so it is never shown to this key again. All or nothing.
    Acking past a review's head is refused (400); another caller's review or broadcast is 404. Answers
    the acked reviews' `cursors`."""
    if not body.acks and not body.broadcast_ids:
        return {"acked": 0, "cursors": []}
    reply = await backend.nudge.Ack(
        nudge_pb2.AckRequest(
            principal=principal.to_proto(),
            acks=[nudge_pb2.Ack(review_id=a.review_id, seq=a.seq) for a in body.acks],
            broadcast_ids=body.broadcast_ids,
        ),
        timeout=backend.timeout_s,
    )
    return {"acked": reply.acked, "cursors": as_cursors(reply.cursors)}
