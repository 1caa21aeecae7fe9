"""The dead-letter verbs (issue 13): an admin retries a dead letter once its cause is fixed, or discards it
with a reason. ``Backends`` finds the service whose outbox holds the event."""

from __future__ import annotations

from reviewloop.common.v1 import outbox_pb2
from reviewloop.shapes import DiscardIn
from reviewloop.tenancy import Principal

from gateway.backends import Backends


async def retry_dead_letter(backend: Backends, principal: Principal, event_id: str) -> outbox_pb2.DeadLetter:
    asked = outbox_pb2.RetryDeadLetterRequest(principal=principal.to_proto(), event_id=event_id)
    return await backend.retry_dead_letter(asked)


async def discard_dead_letter(
    backend: Backends, principal: Principal, event_id: str, body: DiscardIn
) -> outbox_pb2.DeadLetter:
    asked = outbox_pb2.DiscardDeadLetterRequest(
        principal=principal.to_proto(), event_id=event_id, reason=body.reason
    )
    return await backend.discard_dead_letter(asked)
