"""Every service's outbox operator messages as the dead-letter shapes."""

from __future__ import annotations

from reviewloop.common.v1 import outbox_pb2

from gateway.translate import Json, timestamp


def as_dead_letter(message: outbox_pb2.DeadLetter) -> Json:
    return {
        "event_id": message.event_id,
        "source": message.source,
        "destination": message.destination,
        "aggregate_id": message.aggregate_id,
        "type": message.type,
        "occurred_at": timestamp(message.occurred_at),
        "dead_at": timestamp(message.dead_at),
        "reason": message.reason,
        "attempts": message.attempts,
    }
