"""Spec 002's attempt journal: records kept as the producer wrote them, and the checks a batch passes
before any of it is journaled. Pure.

The journal keeps what the producer wrote: each record's ``schema_version`` (1.0.0 records carry no
evidence marker, 1.1.0 adds it, 1.2.0 chains ``prev_hash``/``hash``), the newer envelope fields
(``scope``, ``provenance``, ``actor``, ``branch_id``), a null ``turn_id``, event types this reader does
not know (the vocabulary only grows), and the producer's ids, which are journal offsets (so ``refs``
keep pointing at the records they named). Records are never rewritten in place. Only a record a client
sends without a ``schema_version`` (not a producer's journal line) is composed here, at 1.1.0."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reviewloop.errors import Code, DomainError, FieldViolation, invalid

from dispatch_budget.domain.evidence import (
    ENVELOPE_VERSION,
    EPHEMERAL_TYPES,
    EVENT_TYPES,
    FAMILIES,
    SCHEMA_VERSION,
    sanitize_payload,
)

MAX_JOURNAL_BATCH = 500
MAX_RUN_ID = 80
MAX_TYPE = 200
GENESIS = "0" * 64  # the prev_hash of a chain's first record
CHAINED_SINCE = (1, 2, 0)
ENVELOPE_KEYS = (
    "v",
    "id",
    "session_id",
    "turn_id",
    "ts",
    "family",
    "type",
    "tier",
    "payload",
    "schema_version",
)


@dataclass(frozen=True)
class JournalRecord:
    """One durable journal record as read back. ``id`` is its offset in the run's journal (from 1);
    ``extra`` holds every other key the producer wrote (``scope``, ``provenance``, ``actor``,
    ``branch_id``, ``hash``, ``prev_hash``, and what later versions add)."""

    session_id: str
    turn_id: str | None
    ts: int  # microseconds since the epoch
    family: str  # loop | meta
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    id: int = 0
    v: int = ENVELOPE_VERSION
    tier: str = "durable"
    schema_version: str = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The event type as this reader decodes it: a type it does not know is ``unknown``."""
        return self.type if self.type in EVENT_TYPES else "unknown"

    @property
    def closes_attempt(self) -> bool:
        """The attempt's closing ``turn_completed{final: true}``, whose evidence settles it."""
        return self.type == "turn_completed" and self.payload.get("final") is True

    def to_json(self) -> dict[str, Any]:
        """The record as stored: the ten envelope keys and everything else the producer wrote."""
        return {
            **self.extra,
            "v": self.v,
            "id": self.id,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "ts": self.ts,
            "family": self.family,
            "type": self.type,
            "tier": self.tier,
            "payload": self.payload,
            "schema_version": self.schema_version,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JournalRecord:
        payload = data.get("payload", {})
        turn_id = data.get("turn_id")
        return cls(
            session_id=str(data.get("session_id", "")),
            turn_id=None if turn_id is None else str(turn_id),
            ts=int(data.get("ts", 0)),
            family=str(data.get("family", "loop")),
            type=str(data.get("type", "")),
            payload=dict(payload) if isinstance(payload, Mapping) else {},
            id=int(data.get("id", 0)),
            v=int(data.get("v", ENVELOPE_VERSION)),
            tier=str(data.get("tier", "durable")),
            schema_version=str(data.get("schema_version", "")),
            extra={k: v for k, v in data.items() if k not in ENVELOPE_KEYS},
        )


def check_journal_batch(run_id: str, events: list[Any]) -> None:
    if not run_id or len(run_id) > MAX_RUN_ID:
        raise invalid("/run_id", "a run id of 1 to 80 characters is required")
    if len(events) > MAX_JOURNAL_BATCH:
        raise invalid("/events", f"at most {MAX_JOURNAL_BATCH} events per call")


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, Mapping):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return False


def verbatim_lines(placed: Placed, events: Sequence[Any], lines: Sequence[str]) -> list[str | None]:
    """For each placed record, the line its producer appended when the record is exactly what that
    line says (a producer's record kept as written, its id given); None where the service composed or
    completed the record (a bare event's envelope, an id it assigned), whose line is then canonical."""
    return [
        lines[i] if i < len(lines) and events[i] == record else None
        for i, record in zip(placed.indices, placed.new, strict=True)
    ]


def canonical_line(record: Mapping[str, Any]) -> str:
    """Canonical JSON (spec 002 1.2.0): keys sorted by byte order at every depth (UTF-8 keeps code
    point order), no whitespace, text as UTF-8. What the journal stores for every record."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def record_hash(record: Mapping[str, Any]) -> str:
    """The lowercase hex SHA-256 of the canonical JSON of the record without ``hash``."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical_line(body).encode()).hexdigest()


def _version(text: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return None


def chained(record: Mapping[str, Any]) -> bool:
    """Schema 1.2.0 and later link each record into a hash chain."""
    version = _version(record.get("schema_version"))
    return version is not None and version >= CHAINED_SINCE


def ephemeral(raw: Mapping[str, Any]) -> bool:
    """Live render only, never journaled as durable: ``tier: ephemeral``, or the ``item_delta`` type."""
    return raw.get("tier") == "ephemeral" or raw.get("type") in EPHEMERAL_TYPES


def incoming_record(raw: Any, index: int, now: datetime) -> dict[str, Any]:
    """One event of a batch as the record to journal. A producer's record (it names its
    ``schema_version``) is kept exactly as written; a client's bare event is composed into the
    envelope at 1.1.0 (``ts`` stamped ``now`` when it has none)."""
    if not isinstance(raw, dict):
        raise invalid(f"/events/{index}", "each event is a JSON object")
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > MAX_TYPE:
        raise invalid(f"/events/{index}/type", "a non-empty string (unknown types are kept as unknown)")
    payload = raw.get("payload", {})
    if not isinstance(payload, dict):
        raise invalid(f"/events/{index}/payload", "must be a JSON object")
    offset = raw.get("id")
    if offset is not None and (not isinstance(offset, int) or isinstance(offset, bool) or offset < 1):
        raise invalid(f"/events/{index}/id", "a producer's id is its journal offset: an integer from 1")
    if "schema_version" in raw:
        if not isinstance(raw["schema_version"], str):
            raise invalid(f"/events/{index}/schema_version", "a version string such as 1.1.0")
        return dict(raw)
    family = raw.get("family", "loop")
    if family not in FAMILIES:
        raise invalid(f"/events/{index}/family", "loop or meta")
    ts = raw.get("ts")
    composed = {
        **{k: v for k, v in raw.items() if k not in ENVELOPE_KEYS},
        "v": ENVELOPE_VERSION,
        "session_id": str(raw.get("session_id", ""))[:200],
        "turn_id": None if raw.get("turn_id") is None else str(raw["turn_id"])[:200],
        "ts": ts if isinstance(ts, int) and not isinstance(ts, bool) else int(now.timestamp() * 1_000_000),
        "family": family,
        "type": kind,
        "tier": "durable",
        "payload": sanitize_payload(payload),
        "schema_version": SCHEMA_VERSION,
    }
    if offset is not None:
        composed["id"] = offset
    return composed


@dataclass(frozen=True)
class Placed:
    """A batch placed after the journal's last offset: the records to append (each with its ``id``),
    and how many were an identical re-send of records already journaled."""

    new: list[dict[str, Any]]
    already_journaled: int
    indices: tuple[int, ...] = ()  # the batch index each record of ``new`` came from


def _refuse(index: int, offset: int, why: str) -> DomainError:
    pointer = f"/events/{index}"
    return DomainError(
        Code.BAD_REQUEST,
        f"{pointer}: offset {offset}: {why}",
        violations=(FieldViolation(pointer, f"offset {offset}: {why}"),),
        hints=(("offset", str(offset)),),
    )


def place_batch(
    records: list[tuple[int, dict[str, Any]]],
    last_offset: int,
    stored: Mapping[int, dict[str, Any]],
    last_hash: str | None,
) -> Placed:
    """Place ``(batch index, record)`` pairs after ``last_offset``. A producer's id is its offset:
    the next one appends, one already journaled must be identical (a re-send, skipped), and a gap or
    a differing overlap refuses. ``stored`` holds the journaled records the batch overlaps;
    ``last_hash`` is the journal's last record's ``hash`` (None: it has none). A 1.2.0 chain is
    verified on the way; the first bad offset refuses the whole batch."""
    new: list[dict[str, Any]] = []
    indices: list[int] = []
    duplicates = 0
    expected = last_offset + 1
    prev_hash = last_hash
    for index, record in records:
        offset = record.get("id")
        if offset is None:
            record = {**record, "id": expected}
            offset = expected
        assert isinstance(offset, int)
        if offset < expected:
            if new:
                raise _refuse(index, offset, f"overlaps this batch; the next offset is {expected}")
            if stored.get(offset) != record:
                raise _refuse(
                    index, offset, "already journaled with different content; a journal is append-only"
                )
            duplicates += 1
            continue
        if offset > expected:
            raise _refuse(index, offset, f"leaves a gap; the journal's next offset is {expected}")
        if chained(record):
            _verify_link(index, offset, record, prev_hash)
        prev_hash = record.get("hash") if isinstance(record.get("hash"), str) else None
        new.append(record)
        indices.append(index)
        expected += 1
    return Placed(new, duplicates, tuple(indices))


def _verify_link(index: int, offset: int, record: Mapping[str, Any], prev_hash: str | None) -> None:
    if _has_float(record):
        raise _refuse(index, offset, "a chained record carries a float, which canonical JSON refuses")
    want_prev = prev_hash or GENESIS
    if record.get("prev_hash") != want_prev:
        raise _refuse(index, offset, f"hash chain broken: prev_hash must be {want_prev}")
    if record.get("hash") != record_hash(record):
        raise _refuse(index, offset, "hash chain broken: hash is not the SHA-256 of the canonical record")
