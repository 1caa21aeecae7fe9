"""Use cases of spec 002's attempt journals and their evidence."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from reviewloop.storage import Database, utcnow
from reviewloop.tenancy import Principal

from dispatch_budget import store
from dispatch_budget.app.authority import check_reviewer_plane
from dispatch_budget.domain.evidence import EvidenceStatus, evidence_rejected, evidence_status
from dispatch_budget.domain.journal import JournalRecord, check_journal_batch, journal_record


@dataclass(frozen=True)
class Appended:
    appended: int
    skipped_ephemeral: int
    last_offset: int


@dataclass(frozen=True)
class Evidence:
    status: EvidenceStatus
    offset: int = 0
    schema_version: str = ""
    rejected: dict[str, Any] | None = None  # the evidence_rejected detail, as the producer wrote it


async def append_journal_events(
    db: Database, principal: Principal, run_id: str, events: list[Any]
) -> Appended:
    """Append a batch to the run's journal, all or nothing; each record's ``id`` is its offset."""
    check_reviewer_plane(principal, "Appending to an attempt journal")
    check_journal_batch(run_id, events)
    records = [journal_record(raw, i, utcnow()) for i, raw in enumerate(events)]
    durable = [r for r in records if r is not None]
    project = principal.project_id
    async with db.transaction() as uow:
        last = await store.lock_journal_head(uow.conn, project, run_id)
        numbered = [replace(record, id=offset) for offset, record in enumerate(durable, start=last + 1)]
        await store.append_journal_events(uow.conn, project, run_id, numbered)
        return Appended(len(numbered), len(records) - len(numbered), last + len(numbered))


async def read_journal(
    db: Database, principal: Principal, run_id: str, after: int = 0, limit: int = 1000
) -> list[JournalRecord]:
    async with db.engine.connect() as conn:
        return await store.journal_records(conn, principal.project_id, run_id, after, limit)


async def get_evidence_status(db: Database, principal: Principal, run_id: str) -> Evidence:
    """The evidence of the run's closing turn_completed; ``unknown`` while there is none."""
    async with db.engine.connect() as conn:
        final = await store.closing_turn(conn, principal.project_id, run_id)
    if final is None:
        return Evidence(EvidenceStatus.UNKNOWN)
    return Evidence(
        evidence_status(final.payload), final.id, final.schema_version, evidence_rejected(final.payload)
    )
