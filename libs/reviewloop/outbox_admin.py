"""The operator RPC every service answers over its own outbox: list, retry and discard dead letters.

``service.start`` registers it for every service, so an admin reaches every store's dead letters through
the gateway the same way. Admin principals only; a principal sees its own project's letters, and another
project's read as absent.
"""

from __future__ import annotations

from typing import Any

from reviewloop.common.v1 import outbox_pb2, outbox_pb2_grpc
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.protoconv import stamp
from reviewloop.storage import Database
from reviewloop.storage.outbox import DeadLetter, dead_letters, discard_dead_letter, retry_dead_letter
from reviewloop.tenancy import ActorKind, Principal

MAX_LIST = 500
MAX_REASON = 1000


def _admin(message: Any) -> Principal:
    principal = Principal.from_proto(message)
    if principal.actor_kind not in (ActorKind.ADMIN, ActorKind.SYSTEM):
        raise DomainError(Code.FORBIDDEN_SCOPE, "Dead letters take an admin key.")
    return principal


def _absent(event_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No dead letter {event_id} of this project is held here.")


class OutboxAdmin(outbox_pb2_grpc.OutboxAdminServiceServicer):
    """``OutboxAdminService`` over ``db``'s outbox; ``source`` names the service in each answer."""

    def __init__(self, db: Database, source: str) -> None:
        self.db, self.source = db, source

    def _message(self, letter: DeadLetter) -> outbox_pb2.DeadLetter:
        return outbox_pb2.DeadLetter(
            event_id=letter.event_id,
            source=self.source,
            destination=letter.destination,
            aggregate_id=letter.aggregate_id,
            type=letter.type,
            project_id=letter.project_id,
            occurred_at=stamp(letter.occurred_at),
            dead_at=stamp(letter.dead_at),
            reason=letter.reason,
            attempts=letter.attempts,
        )

    async def ListDeadLetters(
        self, request: outbox_pb2.ListDeadLettersRequest, context: Any
    ) -> outbox_pb2.ListDeadLettersResponse:
        """The principal's project's dead letters, newest first."""
        principal = _admin(request.principal)
        if not 0 <= request.limit <= MAX_LIST:
            raise invalid("/limit", f"must be 1..{MAX_LIST} (0: 100)")
        letters = await dead_letters(self.db, request.limit or 100, principal.project_id)
        return outbox_pb2.ListDeadLettersResponse(dead_letters=[self._message(x) for x in letters])

    async def RetryDeadLetter(
        self, request: outbox_pb2.RetryDeadLetterRequest, context: Any
    ) -> outbox_pb2.DeadLetter:
        """Hand the dead letter back to the relay."""
        principal = _admin(request.principal)
        letter = await retry_dead_letter(self.db, request.event_id, principal.project_id)
        if letter is None:
            raise _absent(request.event_id)
        return self._message(letter)

    async def DiscardDeadLetter(
        self, request: outbox_pb2.DiscardDeadLetterRequest, context: Any
    ) -> outbox_pb2.DeadLetter:
        """Give up on the dead letter, keeping the reason."""
        principal = _admin(request.principal)
        reason = request.reason.strip()
        if not reason or len(reason) > MAX_REASON:
            raise invalid("/reason", f"must say why, in 1..{MAX_REASON} characters")
        letter = await discard_dead_letter(
            self.db, request.event_id, f"{reason} ({principal.actor_kind.value}:{principal.actor_id})",
            principal.project_id,
        )  # fmt: skip
        if letter is None:
            raise _absent(request.event_id)
        return self._message(letter)
