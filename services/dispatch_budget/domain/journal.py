"""Spec 002's attempt journal: one durable event as its envelope spells it, and the checks a batch of
reviewer events passes before any of it is journaled. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reviewloop.errors import invalid

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


@dataclass(frozen=True)
class JournalRecord:
    """One durable journal record. ``id`` is its offset in the run's journal (from 1; 0 until it is
    appended)."""

    session_id: str
    turn_id: str
    ts: int  # microseconds since the epoch
    family: str  # loop | meta
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    id: int = 0
    v: int = ENVELOPE_VERSION
    tier: str = "durable"
    schema_version: str = SCHEMA_VERSION

    @property
    def closes_attempt(self) -> bool:
        """The attempt's closing ``turn_completed{final: true}``, whose evidence settles it."""
        return self.type == "turn_completed" and self.payload.get("final") is True

    def to_json(self) -> dict[str, Any]:
        """The envelope as spec 002 writes it."""
        return {
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
        return cls(
            session_id=str(data.get("session_id", "")),
            turn_id=str(data.get("turn_id", "")),
            ts=int(data.get("ts", 0)),
            family=str(data.get("family", "loop")),
            type=str(data.get("type", "")),
            payload=dict(payload) if isinstance(payload, Mapping) else {},
            id=int(data.get("id", 0)),
            v=int(data.get("v", ENVELOPE_VERSION)),
            tier=str(data.get("tier", "durable")),
            schema_version=str(data.get("schema_version", "")),
        )


def check_journal_batch(run_id: str, events: list[Any]) -> None:
    if not run_id or len(run_id) > MAX_RUN_ID:
        raise invalid("/run_id", "a run id of 1 to 80 characters is required")
    if len(events) > MAX_JOURNAL_BATCH:
        raise invalid("/events", f"at most {MAX_JOURNAL_BATCH} events per call")


def journal_record(raw: Any, index: int, now: datetime) -> JournalRecord | None:
    """One reviewer event as a journal record; None for the live-only ``item_delta``. An event
    without its own integer ``ts`` is stamped ``now``."""
    if not isinstance(raw, dict):
        raise invalid(f"/events/{index}", "each event is a JSON object")
    kind = raw.get("type")
    if kind not in EVENT_TYPES:
        raise invalid(f"/events/{index}/type", f"one of {', '.join(sorted(EVENT_TYPES))}")
    if kind in EPHEMERAL_TYPES:
        return None
    family = raw.get("family", "loop")
    if family not in FAMILIES:
        raise invalid(f"/events/{index}/family", "loop or meta")
    payload = raw.get("payload", {})
    if not isinstance(payload, dict):
        raise invalid(f"/events/{index}/payload", "must be a JSON object")
    ts = raw.get("ts")
    return JournalRecord(
        session_id=str(raw.get("session_id", ""))[:200],
        turn_id=str(raw.get("turn_id", ""))[:200],
        ts=ts if isinstance(ts, int) and not isinstance(ts, bool) else int(now.timestamp() * 1_000_000),
        family=family,
        type=str(kind),
        payload=sanitize_payload(payload),
    )
