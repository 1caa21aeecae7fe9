"""The nudge routes: list_review_events and ack_review_events."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.tenancy import Principal

from gateway.auth import ANY_PROJECT_KEY
from gateway.backends import Backends, backends
from gateway.translate import timestamp

router = APIRouter(tags=["review events"])
Backend = Annotated[Backends, Depends(backends)]
Caller = Annotated[Principal, Depends(ANY_PROJECT_KEY)]


class AckItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    review_id: str = Field(max_length=40)
    seq: int = Field(ge=1)


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


@router.get("/v1/review-events")
async def list_review_events(
    principal: Caller,
    backend: Backend,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str, Query(max_length=64)] = "",
) -> dict[str, Any]:
    reply = await backend.nudge.ListEvents(
        nudge_pb2.ListEventsRequest(principal=principal.to_proto(), limit=limit, cursor=cursor),
        timeout=backend.timeout_s,
    )
    return {"events": [nudge_json(n) for n in reply.events], "next_cursor": reply.next_cursor or None}


@router.post("/v1/review-events/ack")
async def ack_review_events(body: AckIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.nudge.Ack(
        nudge_pb2.AckRequest(
            principal=principal.to_proto(),
            acks=[nudge_pb2.Ack(review_id=a.review_id, seq=a.seq) for a in body.acks],
        ),
        timeout=backend.timeout_s,
    )
    return {"acked": reply.acked}
