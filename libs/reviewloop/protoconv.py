"""Conversions between domain values and protobuf: timestamps, enums, free-form objects (``Struct``).

A domain enum is a ``StrEnum`` of lowercase names (``needs_review``); its proto twin spells the same
names as ``REVIEW_STATE_NEEDS_REVIEW`` with ``..._UNSPECIFIED = 0`` for "not set".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from reviewloop.errors import invalid

E = TypeVar("E", bound=StrEnum)


def stamp(value: datetime) -> Timestamp:
    """``value`` as a protobuf ``Timestamp`` (a naive value is taken as UTC)."""
    result = Timestamp()
    result.FromDatetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    return result


def from_stamp(value: Timestamp) -> datetime:
    """A protobuf ``Timestamp`` as an aware UTC datetime."""
    return value.ToDatetime(tzinfo=UTC)


def rfc3339(value: Timestamp) -> str:
    """A protobuf ``Timestamp`` as the spec's JSON time: RFC 3339 in UTC with a ``Z``."""
    return from_stamp(value).isoformat().replace("+00:00", "Z")


def to_enum(enum: Any, prefix: str, name: str) -> int:
    """The proto enum number of the lowercase ``name`` (``"needs_review"`` -> ``PREFIX_NEEDS_REVIEW``)."""
    return int(enum.Value(prefix + name.upper()))


def enum_name(enum: Any, prefix: str, number: int) -> str:
    """The lowercase name of a proto enum number; ``""`` for UNSPECIFIED or an unknown number."""
    if number not in enum.values() or number == 0:
        return ""
    return str(enum.Name(number)).removeprefix(prefix).lower()


def required_enum(enum: Any, prefix: str, number: int, field: str) -> str:
    """Like ``enum_name``, but UNSPECIFIED is ``bad_request`` naming ``field`` and the legal values."""
    name = enum_name(enum, prefix, number)
    if not name:
        legal = ", ".join(str(n).removeprefix(prefix).lower() for n in list(enum.keys())[1:])
        raise invalid(field, f"required; one of {legal}")
    return name


def from_enum(domain: type[E], enum: Any, prefix: str, number: int) -> E | None:
    """The domain enum member a proto enum number names; None for UNSPECIFIED."""
    name = enum_name(enum, prefix, number)
    return domain(name) if name else None


def optional_scalars(message: Descriptor) -> tuple[str, ...]:
    """The message's ``optional`` scalar fields, in declaration order.

    Those are the fields whose absence is a value (``HasField`` tells); read off the descriptor, a new
    one needs no list kept in step.
    """
    return tuple(
        field.name
        for field in message.fields
        if field.has_presence
        and field.type != FieldDescriptor.TYPE_MESSAGE
        and field.containing_oneof is not None
    )


def oneof_names(message: Descriptor, oneof: str) -> tuple[str, ...]:
    """The field names of one of the message's oneofs, in declaration order.

    The nudge reasons are ``NudgeRequested``'s ``payload``.
    """
    return tuple(field.name for field in message.oneofs_by_name[oneof].fields)


# A Struct's numbers are doubles: an integer within +/-EXACT reads back as the same integer (``3``, not
# ``3.0``); the gateway holds an agent's integers to that bound.
EXACT = 2**53


def to_struct(value: Mapping[str, Any]) -> Struct:
    """A free-form JSON object (an intent's ``meta``) as a ``google.protobuf.Struct``."""
    struct = Struct()
    struct.update(value)
    return struct


def from_struct(struct: Struct) -> dict[str, Any]:
    """The object ``struct`` holds, a whole number within ``EXACT`` read as an integer."""
    whole: dict[str, Any] = _whole(json_format.MessageToDict(struct))
    return whole


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and -EXACT <= value <= EXACT:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value
