"""The base every shape derives from, and the value types the shapes share."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    RootModel,
    WithJsonSchema,
)

# Bounds of protobuf integer fields: a JSON number past them is a 422 at the edge, not an encoding error.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

MAX_BODY_TEXT = 2 * 1024 * 1024
MAX_RULE_CHARS = 2000  # the rules service's lint limit (rules.domain.guardrails.MAX_RULE_CHARS)
MAX_RULE_BODY = 20_000  # save_rule: the service lints the real limit and says so; this only bounds the body


class Shape(BaseModel):
    """A contract shape: exact, so an unknown (or renamed) field is refused."""

    model_config = ConfigDict(extra="forbid")


_T = TypeVar("_T")


def _pointer_token(key: object) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _storable(value: _T) -> _T:
    """Refuse what no encoder or store can hold anywhere inside a free-form JSON value.

    That is an integer beyond 64 bits (orjson, protobuf and PostgreSQL refuse it) or a NUL character
    (PostgreSQL refuses it).
    """
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool) and not INT64_MIN <= item <= INT64_MAX:
            raise ValueError(f"the integer at {path or '/'} is beyond 64 bits; send it as a string")
        if isinstance(item, str) and "\x00" in item:
            raise ValueError(f"the string at {path or '/'} contains a NUL character")
        if isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in str(key):
                    raise ValueError(f"a key at {path or '/'} contains a NUL character")
                stack.append((f"{path}/{_pointer_token(key)}", child))
        elif isinstance(item, list):
            stack.extend((f"{path}/{i}", child) for i, child in enumerate(item))
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


# A free-form JSON value a store keeps: ``Annotated[<its type>, Storable]`` (the JSON schema is unchanged).
Storable = AfterValidator(_storable)
# Text the gateway's own store keeps (PostgreSQL refuses NUL in text).
PlainText = AfterValidator(_no_nul)


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
ReviewModeName = Literal["review", "direct"]
SendPath = Literal["human_reviewed", "reviewer_approved", "graduated_auto", "agent_direct"]
ActorKindName = Literal["agent", "human", "review_agent", "admin", "system"]
# Who wrote a rule or a category, as the SDK reads it: an admin's or a human's is ``human``, a review agent's
# ``agent`` (a rule revision's ``changed_by_kind`` keeps the exact actor kind).
AuthorKind = Literal["agent", "human"]
CategoryState = Literal["supervised", "auto_notify", "auto_silent"]


class ReviewState(RootModel[ReviewStateName]):
    """A review's state (the SDK's ``ReviewState``): ``stale`` and ``stalled`` have no producer today."""


class ReviewMode(RootModel[ReviewModeName]):
    """How a message was resolved: held for ``review``, or sent ``direct`` (the SDK's ``ReviewMode``)."""
