"""The nudge service's messages as ``ReviewEvent``."""

from __future__ import annotations

import orjson
from reviewloop.nudge.v1 import nudge_pb2

from gateway.translate import Json, timestamp


def as_review_event(nudge: nudge_pb2.Nudge) -> Json:
    body: Json = {"seq": nudge.seq, "id": nudge.id, "reason": nudge.reason, "review_id": nudge.review_id}
    if nudge.category_id:
        body["category_id"] = nudge.category_id
    body["payload"] = orjson.loads(nudge.payload_json) if nudge.payload_json else {}
    body["created_at"] = timestamp(nudge.created_at)
    return body
