"""The verbs on a rule's lineage (retire, undo, promote, approve, reject), naming the rev the caller read (a
stale one is 409): one command each, asked by the agent plane's routes, the admin routes and the console's
rules page alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reviewloop.rules.v1 import rules_pb2
from reviewloop.tenancy import Principal

from gateway.backends import Backends

LineageVerb = Literal["RetireRule", "UndoRule", "PromoteRule", "ApproveRule", "RejectRule"]


@dataclass(frozen=True)
class RuleAction:
    """``verb`` on ``lineage_id`` at the ``rev`` the caller read; ``to_layer`` (``org``) only to promote a
    project rule to house style."""

    verb: LineageVerb
    lineage_id: str
    rev: int
    idempotency_key: str = ""
    to_layer: str = ""


async def lineage_verb(backend: Backends, principal: Principal, action: RuleAction) -> rules_pb2.Rule:
    asked = rules_pb2.RuleActionRequest(
        principal=principal.to_proto(),
        lineage_id=action.lineage_id,
        expected_rev=action.rev,
        idempotency_key=action.idempotency_key,
        to_layer=action.to_layer,
    )
    reply: rules_pb2.Rule = await getattr(backend.rules, action.verb)(asked, timeout=backend.timeout_s)
    return reply
