"""Attempt journals (spec 002): each run's append-only records, numbered densely from 1 under the
journal's head row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from reviewloop.storage.schema import insert_new
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget.domain.evidence import sanitize_payload
from dispatch_budget.domain.journal import JournalRecord, canonical_line
from dispatch_budget.store.tables import journal_events, journal_heads


def encode_line(record: Mapping[str, Any]) -> bytes:
    """Any journal record as one newline-terminated JSON line, keys sorted; what JSON cannot carry is
    sanitized to text first."""
    return orjson.dumps(sanitize_payload(record), option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


async def lock_journal_head(conn: AsyncConnection, project_id: str, run_id: str) -> int:
    """The run's last offset (0 for a new journal), locked so appends to one journal serialize."""
    await insert_new(conn, journal_heads, {"project_id": project_id, "run_id": run_id, "last_offset": 0})
    heads = journal_heads.c
    last = (
        await conn.execute(
            select(heads.last_offset)
            .where(heads.project_id == project_id, heads.run_id == run_id)
            .with_for_update()
        )
    ).scalar_one()
    return int(last)


async def append_journal_events(
    conn: AsyncConnection,
    project_id: str,
    run_id: str,
    records: list[dict[str, Any]],
    lines: list[str | None] | None = None,
) -> None:
    """Append records (each with its ``id``, the next offsets) after the locked head and move the
    head to the last of them. Each is stored as its producer's line where ``lines`` has it (byte for
    byte), else as its canonical JSON line; never rewritten."""
    lines = lines or [None] * len(records)
    if not records:
        return
    await conn.execute(
        journal_events.insert(),
        [
            {
                "project_id": project_id,
                "run_id": run_id,
                "offset": record["id"],
                "type": str(record.get("type", ""))[:30],  # an index for the closing turn only
                "record": canonical_line(record) if line is None else line,
                "verbatim": line is not None,
            }
            for record, line in zip(records, lines, strict=True)
        ],
    )
    heads = journal_heads.c
    await conn.execute(
        update(journal_heads)
        .where(heads.project_id == project_id, heads.run_id == run_id)
        .values(last_offset=records[-1]["id"])
    )


async def journal_lines(
    conn: AsyncConnection, project_id: str, run_id: str, offsets: list[int]
) -> dict[int, dict[str, Any]]:
    """The journaled records at ``offsets``, as written, by offset."""
    if not offsets:
        return {}
    j = journal_events.c
    rows = (
        await conn.execute(
            select(j.offset, j.record).where(
                j.project_id == project_id, j.run_id == run_id, j.offset.in_(offsets)
            )
        )
    ).all()
    return {int(row.offset): orjson.loads(row.record) for row in rows}


async def journal_records(
    conn: AsyncConnection, project_id: str, run_id: str, after: int, limit: int
) -> list[JournalRecord]:
    j = journal_events.c
    rows = (
        await conn.execute(
            select(j.record)
            .where(j.project_id == project_id, j.run_id == run_id, j.offset > after)
            .order_by(j.offset)
            .limit(limit)
        )
    ).all()
    return [JournalRecord.from_json(orjson.loads(row.record)) for row in rows]


async def journal_line_page(
    conn: AsyncConnection, project_id: str, run_id: str, after: int, limit: int
) -> list[tuple[int, str, bool]]:
    """(offset, stored line, whether it is the appended line verbatim) of the records after
    ``after``, in order."""
    j = journal_events.c
    rows = (
        await conn.execute(
            select(j.offset, j.record, j.verbatim)
            .where(j.project_id == project_id, j.run_id == run_id, j.offset > after)
            .order_by(j.offset)
            .limit(limit)
        )
    ).all()
    return [(int(row.offset), str(row.record), bool(row.verbatim)) for row in rows]


async def closing_turn(conn: AsyncConnection, project_id: str, run_id: str) -> JournalRecord | None:
    """The run's last ``turn_completed{final: true}``, whose evidence settles the attempt."""
    j = journal_events.c
    rows = (
        await conn.execute(
            select(j.record)
            .where(j.project_id == project_id, j.run_id == run_id, j.type == "turn_completed")
            .order_by(j.offset.desc())
        )
    ).all()
    for row in rows:
        record = JournalRecord.from_json(orjson.loads(row.record))
        if record.closes_attempt:
            return record
    return None
