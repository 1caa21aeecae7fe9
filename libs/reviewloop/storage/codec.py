"""Outbox event payloads: a context's typed event message as the proto3 JSON ``Event.payload`` holds.

JSON, not binary, so an operator can read a stuck outbox row with ``psql``; a consumer parses it into
the producer's own message, so a field the two disagree on fails to parse instead of reading as empty.
"""

from __future__ import annotations

from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)


def encode(message: Message) -> str:
    """``message`` as compact proto3 JSON with the proto field names."""
    return json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None)


def decode(payload: str | bytes, message_type: type[M]) -> M:
    """Parse ``payload`` into ``message_type``.

    Raises:
        google.protobuf.json_format.ParseError: the payload is not JSON of that message (an unknown
            field included).
    """
    return json_format.Parse(payload, message_type())


def as_json_object(message: Message) -> dict[str, Any]:
    """``message`` as the JSON object an agent reads.

    Fields keep their proto names; an unset ``optional`` field is absent, and every other field is
    present, a ``false``, ``0`` or ``""`` included.
    """
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
