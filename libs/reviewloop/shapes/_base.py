"""The base every shape derives from, and the value types the shapes share."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

# Bounds of protobuf integer fields: a JSON number past them is a 422 at the edge, not an encoding error.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

MAX_BODY_TEXT = 2 * 1024 * 1024
MAX_RULE_CHARS = 2000  # the rules service's lint limit (rules.domain.guardrails.MAX_RULE_CHARS)
MAX_RULE_BODY = 20_000  # save_rule: the service lints the real limit and says so; this only bounds the body


class Shape(BaseModel):
    """A contract shape: exact, so an unknown (or renamed) field is refused."""

    model_config = ConfigDict(extra="forbid")


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


# A number of hours as the spec's examples write it: 48.0 reads as 48.
Hours = Annotated[float, PlainSerializer(_whole, return_type=Any), WithJsonSchema({"type": "number"})]
Address = Annotated[str, Field(max_length=320)]
Addresses = list[Address]
Sha = Annotated[str, Field(max_length=64)]

ReviewStateName = Literal[
    "needs_review",
    "in_review",
    "chatting",
    "rejected",
    "approved",
    "failed",
    "sent",
    "auto_sent",
    "cancelled",
    "stale",
    "stalled",
]
SendPath = Literal["human_reviewed", "reviewer_approved", "graduated_auto", "agent_direct"]
ActorKindName = Literal["agent", "human", "review_agent", "admin", "system"]
CategoryState = Literal["supervised", "auto_notify", "auto_silent"]
