"""The base every shape derives from, and the value types the shapes share."""

from __future__ import annotations

from collections.abc import Iterator
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    RootModel,
    WithJsonSchema,
    model_validator,
)

from reviewloop.ids import id_pattern
from reviewloop.protoconv import EXACT

# Bounds of protobuf integer fields: a JSON number past them is a 422 at the edge, not an encoding error.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

MAX_BODY_TEXT = 2 * 1024 * 1024
MAX_RULE_CHARS = 2000  # the rules service's lint limit (rules.domain.guardrails.MAX_RULE_CHARS)
MAX_RULE_BODY = 20_000  # save_rule: the service lints the real limit and says so; this only bounds the body


class _OtherJsonType:
    """Stands in for a JSON value of another type than its field's, so pydantic refuses it at its field."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"a JSON {self.kind}"


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "value"


def _plain_kind(annotation: Any) -> str | None:
    """``int``, ``float`` or ``bool`` where a field holds only that (or null), else None."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Annotated:
        return _plain_kind(args[0])
    if args and get_origin(annotation) in (Union, UnionType):
        kinds = {_plain_kind(a) for a in args}
        return kinds.pop() if len(kinds) == 1 else None
    return {int: "int", float: "float", bool: "bool"}.get(annotation)


class Shape(BaseModel):
    """A contract shape: exact, so an unknown (or renamed) field is refused.

    A JSON value of another type than its field's is refused, never coerced (issue 34): pydantic's lax mode
    would read ``"3"`` or ``true`` as an integer and ``0`` or ``"yes"`` as a boolean, which the published
    schema refuses. An integer field still takes ``3.0`` (JSON Schema's integer does).
    """

    # Patterns read as the services' Python ``re`` reads them (and as schemathesis generates from them):
    # ``$`` also matches before a final newline.
    model_config = ConfigDict(extra="forbid", regex_engine="python-re")

    @model_validator(mode="before")
    @classmethod
    def _no_coercion(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        checked = None
        for key, kind in _plain_fields(cls).items():
            value = data.get(key)
            if value is None:
                continue
            if kind == "bool" and not isinstance(value, bool):
                wrong = True
            elif kind in ("int", "float"):
                wrong = isinstance(value, bool) or not isinstance(value, int | float)
            else:
                wrong = False
            if wrong:
                checked = checked if checked is not None else dict(data)
                checked[key] = _OtherJsonType(_json_type(value))
        return data if checked is None else checked


_T = TypeVar("_T")
_PLAIN_FIELDS: dict[type, dict[str, str]] = {}


def _plain_fields(model: type[BaseModel]) -> dict[str, str]:
    """The input keys of ``model``'s integer, number and boolean fields (every alias a field reads), by kind."""
    found = _PLAIN_FIELDS.get(model)
    if found is None:
        found = {}
        for name, field in model.model_fields.items():
            kind = _plain_kind(field.annotation)
            if kind is None:
                continue
            keys = {name, field.alias or name}
            alias = field.validation_alias
            if isinstance(alias, str):
                keys.add(alias)
            elif isinstance(alias, AliasChoices):
                keys.update(choice for choice in alias.choices if isinstance(choice, str))
            found.update(dict.fromkeys(keys, kind))
        _PLAIN_FIELDS[model] = found
    return found


def _pointer_token(key: object) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _walk(value: object) -> Iterator[tuple[str, object]]:
    """Every value inside a free-form JSON value, with its JSON pointer."""
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        path, item = stack.pop()
        yield path, item
        if isinstance(item, dict):
            stack.extend((f"{path}/{_pointer_token(key)}", child) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((f"{path}/{i}", child) for i, child in enumerate(item))


def _storable(value: _T) -> _T:
    """Refuse what no encoder or store can hold anywhere inside a free-form JSON value.

    That is an integer beyond 64 bits (orjson, protobuf and PostgreSQL refuse it) or a NUL character
    (PostgreSQL refuses it).
    """
    for path, item in _walk(value):
        # A float too: JSON Schema cannot tell 1e19 from 10000000000000000000, so neither is taken.
        if (
            isinstance(item, int | float)
            and not isinstance(item, bool)
            and not INT64_MIN <= item <= INT64_MAX
        ):
            raise ValueError(f"the number at {path or '/'} is beyond 64 bits; send it as a string")
        if isinstance(item, str) and "\x00" in item:
            raise ValueError(f"the string at {path or '/'} contains a NUL character")
        if isinstance(item, dict) and any("\x00" in str(key) for key in item):
            raise ValueError(f"a key at {path or '/'} contains a NUL character")
    return value


def _exact_in_struct(value: _T) -> _T:
    """Refuse an integer a ``google.protobuf.Struct`` cannot carry exactly (its numbers are doubles)."""
    for path, item in _walk(value):
        if isinstance(item, int) and not isinstance(item, bool) and not -EXACT <= item <= EXACT:
            raise ValueError(f"the integer at {path or '/'} is beyond 2^53; send it as a string")
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


def _json_integer(value: _T) -> _T:
    if isinstance(value, bool | str):
        raise ValueError("must be a JSON integer, not a boolean or a string")
    return value


# An integer as JSON Schema reads one: 3 and 3.0, never "3" or true (pydantic's lax mode takes both).
JsonInteger = BeforeValidator(_json_integer)

# A free-form JSON value a store keeps: ``Annotated[<its type>, Storable]`` (the JSON schema is unchanged).
Storable = AfterValidator(_storable)
# ... that also travels as a ``google.protobuf.Struct`` (an intent's ``meta``).
StructValue = AfterValidator(_exact_in_struct)
# Text the gateway's own store keeps (PostgreSQL refuses NUL in text).
PlainText = AfterValidator(_no_nul)


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


# A number of hours as the spec's examples write it: 48.0 reads as 48.
Hours = Annotated[float, PlainSerializer(_whole, return_type=Any), WithJsonSchema({"type": "number"})]
# Whitespace as a regex class body that means the same to Python's ``re`` and ``str.split()`` (the services'
# reading) and to ECMA-262 (a generated client's): ``\s`` and the characters only one of them counts.
SPACE = r"\s\x1c-\x1f\x85\ufeff"
# What review_state takes for an email address (review_state.domain.submission._ADDRESS), without NUL.
_ADDRESS_PART = rf"[^@<>\x00{SPACE}]+"
ADDRESS_PATTERN = rf"^{_ADDRESS_PART}@{_ADDRESS_PART}\.{_ADDRESS_PART}$"
Address = Annotated[str, Field(max_length=320, pattern=ADDRESS_PATTERN)]
Addresses = list[Address]
# A full commit SHA (dispatch_budget.domain.budget.FULL_SHA); ``Sha`` also takes "" (none given).
FULL_SHA_PATTERN = r"^([0-9a-f]{40}|[0-9a-f]{64})$"
FullSha = Annotated[str, Field(max_length=64, pattern=FULL_SHA_PATTERN)]
Sha = Annotated[str, Field(max_length=64, pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})?$")]
# A category's name: 1 to 200 characters, not all blank (rules collapses its runs of whitespace).
CategoryName = Annotated[
    str, Field(min_length=1, max_length=200, pattern=rf"^[^\x00]*[^\x00{SPACE}][^\x00]*$")
]


def id_or_empty(prefix: str) -> Any:
    """An optional id field of one type: ``<prefix>_`` and 26 Crockford characters, or "" (none)."""
    return Field(default="", max_length=40, pattern=f"^({id_pattern(prefix)})?$")


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
