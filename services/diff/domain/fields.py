"""The inputs of a diff (spec 000's message fields), their size bound, and their content address.

``FIELDS`` is the spec's field order; every output of ``message.compute`` follows it. The content
address ``input_sha256`` hashes the algorithm version with both inputs as canonical JSON, so the same
inputs always map to the same stored diff.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# Bumped when the algorithm or the output format changes, so a recompute under a new version is a
# different content address rather than a silent change of the stored bytes.
ALGORITHM = "reviewloop.diff/1"
MAX_FIELD_BYTES = 2 * 1024 * 1024
CONTEXT_LINES = 3


class Kind(StrEnum):
    TEXT = "text"
    SCALAR = "scalar"
    LIST = "list"
    MAP = "map"
    ATTACHMENTS = "attachments"


# The spec's field order: `fields_changed`, `hunks` and `diff_unified` all follow it.
FIELDS: tuple[tuple[str, Kind], ...] = (
    ("subject", Kind.SCALAR),
    ("body_text", Kind.TEXT),
    ("body_html", Kind.TEXT),
    ("to", Kind.LIST),
    ("cc", Kind.LIST),
    ("bcc", Kind.LIST),
    ("reply_to", Kind.SCALAR),
    ("headers", Kind.MAP),
    ("attachments", Kind.ATTACHMENTS),
)


@dataclass(frozen=True)
class Attachment:
    filename: str
    content_type: str
    content_sha256: str

    def label(self) -> str:
        return f"{self.filename} ({self.content_type}; sha256={self.content_sha256})"


@dataclass(frozen=True)
class MessageFields:
    """The diffable fields of one revision of a message."""

    subject: str = ""
    body_text: str = ""
    body_html: str = ""
    to: tuple[str, ...] = ()
    cc: tuple[str, ...] = ()
    bcc: tuple[str, ...] = ()
    reply_to: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()


def _canonical_json(value: Any, sort_keys: bool = False) -> str:
    # The stored bytes and content addresses of every diff ever computed: UTF-8 as is, no whitespace.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)


@dataclass(frozen=True)
class Diff:
    fields_changed: tuple[str, ...]
    hunks: tuple[dict[str, Any], ...]
    diff_unified: str

    @property
    def diff_json(self) -> str:
        """The spec's DiffJson, as canonical bytes: keys in spec order, no whitespace."""
        return _canonical_json({"fields_changed": list(self.fields_changed), "hunks": list(self.hunks)})


@dataclass(frozen=True)
class Oversize:
    """A field over ``MAX_FIELD_BYTES`` on one side (``before`` or ``after``)."""

    side: str
    field: str
    size: int


def _utf8_size(value: str) -> int:
    if len(value) * 4 <= MAX_FIELD_BYTES:  # cannot be over: skip the encode
        return len(value)
    return len(value.encode("utf-8", "surrogatepass"))


def field_size(fields: MessageFields, name: str) -> int:
    """A field's size in UTF-8 bytes; lists and maps count all their strings."""
    value = getattr(fields, name)
    if isinstance(value, str):
        return _utf8_size(value)
    if isinstance(value, Mapping):
        return sum(_utf8_size(k) + _utf8_size(v) for k, v in value.items())
    if name == "attachments":
        return sum(_utf8_size(a.filename) + _utf8_size(a.content_type) + len(a.content_sha256) for a in value)
    return sum(_utf8_size(item) for item in value)


def oversize(before: MessageFields, after: MessageFields) -> Oversize | None:
    """The first field (in spec order, before then after) over the 2 MiB bound, if any."""
    for side, fields in (("before", before), ("after", after)):
        for name, _ in FIELDS:
            size = field_size(fields, name)
            if size > MAX_FIELD_BYTES:
                return Oversize(side, name, size)
    return None


def _canonical(fields: MessageFields) -> dict[str, Any]:
    return {
        "subject": fields.subject,
        "body_text": fields.body_text,
        "body_html": fields.body_html,
        "to": list(fields.to),
        "cc": list(fields.cc),
        "bcc": list(fields.bcc),
        "reply_to": fields.reply_to,
        "headers": dict(fields.headers),
        "attachments": [[a.filename, a.content_type, a.content_sha256] for a in fields.attachments],
    }


def input_sha256(before: MessageFields, after: MessageFields) -> str:
    """The content address of a diff: SHA-256 over the algorithm version and both inputs, canonical JSON."""
    body = {"algorithm": ALGORITHM, "before": _canonical(before), "after": _canonical(after)}
    return hashlib.sha256(_canonical_json(body, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()
