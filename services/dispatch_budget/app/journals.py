"""Use cases of spec 002's attempt journals and their evidence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reviewloop.errors import invalid
from reviewloop.storage import Database, utcnow
from reviewloop.tenancy import Principal

from dispatch_budget import store
from dispatch_budget.app.authority import check_reviewer_plane
from dispatch_budget.domain.evidence import EvidenceStatus, evidence_rejected, evidence_status
from dispatch_budget.domain.journal import (
    JournalRecord,
    check_journal_batch,
    ephemeral,
    incoming_record,
    place_batch,
    verbatim_lines,
)


@dataclass(frozen=True)
class Appended:
    appended: int
    skipped_ephemeral: int
    last_offset: int
    already_journaled: int = 0  # an identical re-send of records the journal holds: skipped


@dataclass(frozen=True)
class Evidence:
    status: EvidenceStatus
    offset: int = 0
    schema_version: str = ""
    rejected: dict[str, Any] | None = None  # the evidence_rejected detail, as the producer wrote it


async def append_journal_events(
    db: Database, principal: Principal, run_id: str, events: list[Any], lines: Sequence[str] = ()
) -> Appended:
    """Append a batch to the run's journal, all or nothing, keeping each record as the producer wrote
    it: its id is its offset (a gap or a differing overlap refuses, an identical re-send is skipped),
    a 1.2.0 hash chain is verified, and ephemeral records are never journaled. ``lines`` are the
    events as appended (JSON texts, by batch index): a producer's record is stored as its own line."""
    check_reviewer_plane(principal, "Appending to an attempt journal")
    check_journal_batch(run_id, events)
    now = utcnow()
    records = [(i, incoming_record(raw, i, now)) for i, raw in enumerate(events)]
    durable = [(i, record) for i, record in records if not ephemeral(record)]
    project = principal.project_id
    async with db.transaction() as uow:
        last = await store.lock_journal_head(uow.conn, project, run_id)
        overlap = [r["id"] for _, r in durable if isinstance(r.get("id"), int) and r["id"] <= last]
        stored = await store.journal_lines(uow.conn, project, run_id, overlap)
        tail = await store.journal_lines(uow.conn, project, run_id, [last]) if last else {}
        last_hash = tail.get(last, {}).get("hash")
        placed = place_batch(durable, last, stored, last_hash if isinstance(last_hash, str) else None)
        await store.append_journal_events(
            uow.conn, project, run_id, placed.new, verbatim_lines(placed, events, lines)
        )
        return Appended(
            len(placed.new),
            len(records) - len(durable),
            placed.new[-1]["id"] if placed.new else last,
            placed.already_journaled,
        )


async def read_journal(
    db: Database, principal: Principal, run_id: str, after: int = 0, limit: int = 1000
) -> list[JournalRecord]:
    async with db.engine.connect() as conn:
        return await store.journal_records(conn, principal.project_id, run_id, after, limit)


@dataclass(frozen=True)
class JournalPage:
    lines: list[str]  # each record's stored line, newline-terminated
    last_offset: int
    more: bool
    reencoded: list[int]  # offsets whose line is the service's canonical JSON, not the appended bytes


MAX_READ = 1000


async def read_journal_lines(
    db: Database, principal: Principal, run_id: str, after: int = 0, limit: int = 0
) -> JournalPage:
    """The run's journal read back after ``after``, in offset order, paged: each record exactly the line
    its producer appended, or, for a record journaled before lines were kept or a bare event the
    service composed, its canonical JSON, named in ``reencoded``. An unknown run reads as an empty
    journal (a tenant learns nothing of another's runs)."""
    if after < 0:
        raise invalid("/after", "an offset from 0")
    if limit < 0 or limit > MAX_READ:
        raise invalid("/limit", f"1 to {MAX_READ}")
    limit = limit or 500
    async with db.engine.connect() as conn:
        rows = await store.journal_line_page(conn, principal.project_id, run_id, after, limit + 1)
    page = rows[:limit]
    return JournalPage(
        [line + "\n" for _, line, _ in page],
        page[-1][0] if page else after,
        len(rows) > limit,
        [offset for offset, _, verbatim in page if not verbatim],
    )


async def get_evidence_status(db: Database, principal: Principal, run_id: str) -> Evidence:
    """The evidence of the run's closing turn_completed; ``unknown`` while there is none."""
    async with db.engine.connect() as conn:
        final = await store.closing_turn(conn, principal.project_id, run_id)
    if final is None:
        return Evidence(EvidenceStatus.UNKNOWN)
    return Evidence(
        evidence_status(final.payload), final.id, final.schema_version, evidence_rejected(final.payload)
    )
