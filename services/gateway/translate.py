"""Protobuf to the spec's JSON: snake_case, lowercase enums, RFC 3339 UTC, absent optionals omitted."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp


def timestamp(value: Timestamp) -> str:
    return value.ToDatetime(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def enum_name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


# Bounds of protobuf integer fields: a JSON number past them is a 422 at the edge, not an encoding error.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
