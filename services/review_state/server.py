"""The ReviewStateService servicer: translate protobuf, call ``app``, return protobuf."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import orjson
from google.protobuf.timestamp_pb2 import Timestamp
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.review.v1 import review_pb2, review_pb2_grpc
from reviewloop.service import Peers, Registration
from reviewloop.storage import Database
from reviewloop.tenancy import Principal

from review_state import app
from review_state.domain.machine import CLOSED, State
from review_state.domain.submission import Draft
from review_state.store import Review

_KINDS = {
    "send": review_pb2.MESSAGE_KIND_SEND,
    "reply": review_pb2.MESSAGE_KIND_REPLY,
    "forward": review_pb2.MESSAGE_KIND_FORWARD,
}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}


def _state_to_proto(state: State) -> review_pb2.ReviewState.ValueType:
    return review_pb2.ReviewState.Value(f"REVIEW_STATE_{state.name}")


def _state_from_proto(value: review_pb2.ReviewState.ValueType) -> str:
    name = review_pb2.ReviewState.Name(value)
    return State[name.removeprefix("REVIEW_STATE_")].value


def _timestamp(value: object) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value)  # type: ignore[arg-type]
    return stamp


def review_to_proto(review: Review) -> review_pb2.Review:
    message = review_pb2.Review(
        id=review.id,
        org_id=review.org_id,
        project_id=review.project_id,
        agent_id=review.agent_id,
        category_id=review.category_id,
        kind=_KINDS[review.kind],
        state=_state_to_proto(review.state),
        revision=review.revision,
        version=review.version,
        closed=review.state in CLOSED,
        to=review.to,
        cc=review.cc,
        bcc=review.bcc,
        subject=review.subject,
        body_text=review.body_text,
        created_at=_timestamp(review.created_at),
        updated_at=_timestamp(review.updated_at),
    )
    if review.intent is not None:
        meta = review.intent.get("meta")
        message.intent.summary = review.intent.get("summary", "")
        message.intent.meta_json = orjson.dumps(meta).decode() if meta is not None else ""
    for name in ("message_id", "thread_ref", "send_path", "send_error", "gate_outcome"):
        value = getattr(review, name)
        if value is not None:
            setattr(message, name, value)
    return message


def _intent(request: review_pb2.SubmitRequest) -> dict[str, object] | None:
    if not request.HasField("intent"):
        return None
    intent: dict[str, object] = {"summary": request.intent.summary}
    if request.intent.meta_json:
        try:
            meta = orjson.loads(request.intent.meta_json)
        except orjson.JSONDecodeError as exc:
            raise DomainError(Code.BAD_REQUEST, "/intent/meta: not a JSON object") from exc
        if not isinstance(meta, dict):
            raise DomainError(Code.BAD_REQUEST, "/intent/meta: must be a JSON object")
        intent["meta"] = meta
    return intent


class ReviewStateServicer(review_pb2_grpc.ReviewStateServiceServicer):
    def __init__(self, db: Database) -> None:
        self.db = db

    async def Submit(
        self, request: review_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> review_pb2.SubmitResponse:
        kind = _KIND_NAMES.get(request.kind)
        if kind is None:
            raise DomainError(Code.BAD_REQUEST, "kind must be send, reply or forward.")
        draft = Draft(
            to=list(request.to),
            cc=list(request.cc),
            bcc=list(request.bcc),
            subject=request.subject,
            body_text=request.body_text,
            intent=_intent(request),
        )
        review = await app.submit(
            self.db,
            Principal.from_proto(request.principal),
            kind=kind,
            draft=draft,
            category_id=request.category_id,
            idempotency_key=request.idempotency_key,
        )
        return review_pb2.SubmitResponse(status="queued_for_review", review=review_to_proto(review))

    async def GetReview(
        self, request: review_pb2.GetReviewRequest, context: grpc.aio.ServicerContext
    ) -> review_pb2.Review:
        review = await app.get_review(self.db, Principal.from_proto(request.principal), request.review_id)
        return review_to_proto(review)

    async def ListReviews(
        self, request: review_pb2.ListReviewsRequest, context: grpc.aio.ServicerContext
    ) -> review_pb2.ListReviewsResponse:
        reviews, next_cursor = await app.list_reviews(
            self.db,
            Principal.from_proto(request.principal),
            states=[_state_from_proto(s) for s in request.states],
            agent_id=request.agent_id,
            category_id=request.category_id,
            cursor=request.cursor,
            limit=request.limit,
        )
        return review_pb2.ListReviewsResponse(
            reviews=[review_to_proto(r) for r in reviews], next_cursor=next_cursor
        )

    async def Cancel(
        self, request: review_pb2.CancelRequest, context: grpc.aio.ServicerContext
    ) -> review_pb2.Review:
        review = await app.cancel(
            self.db,
            Principal.from_proto(request.principal),
            request.review_id,
            request.parent_revision,
            request.idempotency_key,
        )
        return review_to_proto(review)

    async def Ingest(
        self, request: common_pb2.IngestRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.IngestResponse:
        accepted, duplicates = await app.ingest(self.db, list(request.events))
        return common_pb2.IngestResponse(accepted=accepted, duplicates=duplicates)


def servicers(db: Database, peers: Peers) -> Sequence[Registration]:
    return [
        (
            review_pb2_grpc.add_ReviewStateServiceServicer_to_server,
            ReviewStateServicer(db),
            "reviewloop.review.v1.ReviewStateService",
        )
    ]
