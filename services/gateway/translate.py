"""Protobuf to the spec's JSON: snake_case, lowercase enums, RFC 3339 UTC, absent optionals omitted."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import orjson
from google.protobuf.timestamp_pb2 import Timestamp
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.review.v1 import review_pb2


def timestamp(value: Timestamp) -> str:
    return value.ToDatetime(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def enum_name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


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
