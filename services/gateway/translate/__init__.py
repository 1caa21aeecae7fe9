"""Protobuf to the spec's JSON and back, one module per context.

Each ``as_<shape>`` constructor reads a backend's answer into the fields of the ``reviewloop.shapes`` model
of the same name: snake_case keys, lowercase enums, RFC 3339 UTC, and an absent optional left out (never
``null``, unless the shape says ``null`` means something). The model is the declaration; a constructor only
says where each field comes from.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

Json = dict[str, Any]


def timestamp(value: Timestamp) -> str:
    return value.ToDatetime(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def enum_name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


def present(message: Any, *names: str) -> Json:
    """The named fields ``message`` sets, in that order: a proto3 scalar at its zero value is absent, and
    an absent optional is left out."""
    return {name: getattr(message, name) for name in names if getattr(message, name)}


def page(items: list[Json], next_cursor: str = "", total: int | None = None) -> Json:
    """The SDK's ``Page<T>``: ``items``, ``total`` (every match across the pages: the backend's count, or
    the items themselves where one answer holds them all) and ``next_cursor`` (absent on the last page)."""
    body: Json = {"items": items, "total": len(items) if total is None else total}
    if next_cursor:
        body["next_cursor"] = next_cursor
    return body
