"""The composer's review routes (spec 000): send, read, list, cancel."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, Query
from pydantic import BaseModel, ConfigDict, Field
from reviewloop.errors import invalid
from reviewloop.review.v1 import review_pb2
from reviewloop.tenancy import Principal

from gateway.auth import AGENT, ANY_PROJECT_KEY, COMPOSER_OR_HUMAN
from gateway.backends import Backends, backends
from gateway.translate import enum_name, timestamp

router = APIRouter(tags=["reviews"])

MAX_BODY_TEXT = 2 * 1024 * 1024
Backend = Annotated[Backends, Depends(backends)]
IdempotencyKey = Annotated[str, Header(alias="Idempotency-Key", max_length=255)]


class IntentIn(BaseModel):
    """ReviewIntent: the one-sentence summary the human reviewer reads."""

    model_config = ConfigDict(extra="forbid")
    summary: str = Field(max_length=2000)
    meta: dict[str, Any] | None = None


class SendIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: list[Annotated[str, Field(max_length=320)]] = Field(min_length=1, max_length=100)
    cc: list[Annotated[str, Field(max_length=320)]] = Field(default_factory=list, max_length=100)
    bcc: list[Annotated[str, Field(max_length=320)]] = Field(default_factory=list, max_length=100)
    subject: str = Field(max_length=998)
    body_text: str = Field(max_length=MAX_BODY_TEXT)
    intent: IntentIn | None = None
    category_id: str | None = Field(default=None, max_length=40)


class CancelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parent_revision: int = Field(ge=1)


def review_json(review: review_pb2.Review) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": review.id,
        "state": enum_name(review_pb2.ReviewState, review.state, "REVIEW_STATE_"),
        "revision": review.revision,
        "version": review.version,
        "closed": review.closed,
        "org_id": review.org_id,
        "project_id": review.project_id,
        "agent_id": review.agent_id,
        "category_id": review.category_id or None,
        "kind": enum_name(review_pb2.MessageKind, review.kind, "MESSAGE_KIND_"),
        "to": list(review.to),
        "cc": list(review.cc),
        "bcc": list(review.bcc),
        "subject": review.subject,
        "body_text": review.body_text,
        "intent": None,
        "created_at": timestamp(review.created_at),
        "updated_at": timestamp(review.updated_at),
    }
    if review.HasField("intent"):
        intent: dict[str, Any] = {"summary": review.intent.summary}
        if review.intent.meta_json:
            intent["meta"] = orjson.loads(review.intent.meta_json)
        body["intent"] = intent
    for name in ("message_id", "thread_ref", "send_path", "send_error", "gate_outcome"):
        if review.HasField(name):
            body[name] = getattr(review, name)
    return body


@router.post("/v1/messages", status_code=202)
async def send_email(
    body: SendIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    request = review_pb2.SubmitRequest(
        principal=principal.to_proto(),
        kind=review_pb2.MESSAGE_KIND_SEND,
        to=body.to,
        cc=body.cc,
        bcc=body.bcc,
        subject=body.subject,
        body_text=body.body_text,
        category_id=body.category_id or "",
        idempotency_key=idempotency_key,
    )
    if body.intent is not None:
        request.intent.summary = body.intent.summary
        request.intent.meta_json = (
            orjson.dumps(body.intent.meta).decode() if body.intent.meta is not None else ""
        )
    reply = await backend.review.Submit(request, timeout=backend.timeout_s)
    review = review_json(reply.review)
    return {"status": reply.status, "review_id": review["id"], "state": review["state"], "review": review}


@router.get("/v1/reviews/{review_id}")
async def get_review(
    review_id: str, principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> dict[str, Any]:
    reply = await backend.review.GetReview(
        review_pb2.GetReviewRequest(principal=principal.to_proto(), review_id=review_id),
        timeout=backend.timeout_s,
    )
    return review_json(reply)


_STATES = {
    review_pb2.ReviewState.Name(v).removeprefix("REVIEW_STATE_").lower(): v
    for v in review_pb2.ReviewState.values()
    if v
}


@router.get("/v1/reviews")
async def list_reviews(
    principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)],
    backend: Backend,
    state: Annotated[list[str], Query()] = [],  # noqa: B006 - FastAPI reads the default, never mutates it
    agent_id: Annotated[str, Query(max_length=40)] = "",
    category_id: Annotated[str, Query(max_length=40)] = "",
    cursor: Annotated[str, Query(max_length=64)] = "",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    unknown = [s for s in state if s not in _STATES]
    if unknown:
        raise invalid("/state", f"unknown state {unknown[0]!r}; one of {', '.join(_STATES)}")
    reply = await backend.review.ListReviews(
        review_pb2.ListReviewsRequest(
            principal=principal.to_proto(),
            states=[_STATES[s] for s in state],
            agent_id=agent_id,
            category_id=category_id,
            cursor=cursor,
            limit=limit,
        ),
        timeout=backend.timeout_s,
    )
    return {"reviews": [review_json(r) for r in reply.reviews], "next_cursor": reply.next_cursor or None}


@router.post("/v1/reviews/{review_id}/cancel")
async def cancel_review(
    review_id: str,
    body: CancelIn,
    principal: Annotated[Principal, Depends(COMPOSER_OR_HUMAN)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    reply = await backend.review.Cancel(
        review_pb2.CancelRequest(
            principal=principal.to_proto(),
            review_id=review_id,
            parent_revision=body.parent_revision,
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return review_json(reply)
