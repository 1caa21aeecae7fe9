"""The nudge routes: list_review_events, wait_for_review_event and ack_review_events (spec 000, "Nudge")."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.tenancy import Principal

from gateway.auth import ANY_PROJECT_KEY
from gateway.backends import Backends, backends
from gateway.translate import INT64_MAX, timestamp

router = APIRouter(tags=["review events"])
Backend = Annotated[Backends, Depends(backends)]
Caller = Annotated[Principal, Depends(ANY_PROJECT_KEY)]


class AckItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    review_id: str = Field(max_length=40)
    seq: int = Field(ge=1, le=INT64_MAX)


class AckIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    acks: list[AckItem] = Field(min_length=1, max_length=100)


def nudge_json(nudge: nudge_pb2.Nudge) -> dict[str, Any]:
    body: dict[str, Any] = {
        "seq": nudge.seq,
        "id": nudge.id,
        "reason": nudge.reason,
        "review_id": nudge.review_id,
    }
    if nudge.category_id:
        body["category_id"] = nudge.category_id
    body["payload"] = orjson.loads(nudge.payload_json) if nudge.payload_json else {}
    body["created_at"] = timestamp(nudge.created_at)
    return body


@router.get("/v1/review-events", operation_id="list_review_events")
async def list_review_events(
    principal: Caller,
    backend: Backend,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str, Query(max_length=64)] = "",
) -> dict[str, Any]:
    """The caller's un-acked nudges across its reviews, oldest first, a page at a time
    (`next_cursor`). An acked nudge never re-surfaces."""
    reply = await backend.nudge.ListEvents(
        nudge_pb2.ListEventsRequest(principal=principal.to_proto(), limit=limit, cursor=cursor),
        timeout=backend.timeout_s,
    )
    return {"events": [nudge_json(n) for n in reply.events], "next_cursor": reply.next_cursor or None}


@router.get("/v1/review-events/wait", operation_id="wait_for_review_event")
async def wait_for_review_event(
    principal: Caller,
    backend: Backend,
    timeout_s: Annotated[float, Query(ge=1, le=60)] = 30,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    """Long-poll: answers as soon as one of the caller's nudges is un-acked and visible, or with
    `{"events": []}` after `timeout_s` (1..60 s)."""
    reply = await backend.nudge.WaitForEvents(
        nudge_pb2.WaitForEventsRequest(principal=principal.to_proto(), timeout_s=timeout_s, limit=limit),
        timeout=timeout_s + backend.timeout_s,
    )
    return {"events": [nudge_json(n) for n in reply.events]}


@router.post("/v1/review-events/ack", operation_id="ack_review_events")
async def ack_review_events(body: AckIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    """Advance each review's ack cursor to `seq`: idempotent, never backwards, all or nothing. Acking
    past a review's head is refused (400); another caller's review is 404."""
    reply = await backend.nudge.Ack(
        nudge_pb2.AckRequest(
            principal=principal.to_proto(),
            acks=[nudge_pb2.Ack(review_id=a.review_id, seq=a.seq) for a in body.acks],
        ),
        timeout=backend.timeout_s,
    )
    return {"acked": reply.acked}
