"""Who is acting: the principal every request carries, as the domain sees it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError


class ActorKind(StrEnum):
    """Who a principal acts as; the review state machine decides which verbs each kind may use."""

    AGENT = "agent"
    HUMAN = "human"
    REVIEW_AGENT = "review_agent"
    ADMIN = "admin"
    SYSTEM = "system"
    # A service key (a code-review orchestrator): keeps its service identity, never a person.
    SERVICE = "service"


_TO_PROTO = {kind: common_pb2.ActorKind.Value(f"ACTOR_KIND_{kind.name}") for kind in ActorKind}
_FROM_PROTO = {value: kind for kind, value in _TO_PROTO.items()}


@dataclass(frozen=True)
class Principal:
    """The tenant (``org_id``, ``project_id``) and the actor a request runs as.

    Every service scopes its reads and writes to the principal's project.
    """

    org_id: str
    project_id: str
    actor_kind: ActorKind
    actor_id: str

    @classmethod
    def from_proto(cls, message: common_pb2.Principal) -> Principal:
        """Refuses a request with no tenant: every service enforces tenancy with these fields."""
        kind = _FROM_PROTO.get(message.actor_kind)
        if kind is None or not message.org_id or not message.project_id or not message.actor_id:
            raise DomainError(Code.UNAUTHORIZED, "The request carries no complete principal.")
        return cls(message.org_id, message.project_id, kind, message.actor_id)

    def to_proto(self) -> common_pb2.Principal:
        """The principal as the ``Principal`` message every service RPC carries."""
        return common_pb2.Principal(
            org_id=self.org_id,
            project_id=self.project_id,
            actor_kind=_TO_PROTO[self.actor_kind],
            actor_id=self.actor_id,
        )
