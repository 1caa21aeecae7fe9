"""The nudge service's messages as ``ReviewEvent``."""

from __future__ import annotations

from collections.abc import Iterable

import orjson
from reviewloop.nudge.v1 import nudge_pb2

from gateway.translate import Json, timestamp


def as_review_event(nudge: nudge_pb2.Nudge) -> Json:
    """A review's nudge, or a broadcast: ``seq`` 0 and no ``review_id`` (acked by id, ``broadcast_ids``)."""
    body: Json = {"seq": nudge.seq, "id": nudge.id, "reason": nudge.reason}
    if nudge.review_id:
        body["review_id"] = nudge.review_id
    if nudge.category_id:
        body["category_id"] = nudge.category_id
    body["payload"] = orjson.loads(nudge.payload_json) if nudge.payload_json else {}
    body["created_at"] = timestamp(nudge.created_at)
    return body


def as_cursors(cursors: Iterable[nudge_pb2.Cursor]) -> list[Json]:
    """``ReviewEventCursor``s: each review's ack frontier."""
    return [{"review_id": c.review_id, "last_acked_seq": c.last_acked_seq} for c in cursors]
