"""Runs, their admission scopes, admission receipts and settlements, extension receipts and stopped
launches (spec 003)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reviewloop.records import from_row, to_columns
from reviewloop.review_dispatch.selection import ReviewMode
from reviewloop.storage.schema import insert_new
from sqlalchemy import ColumnElement, Integer, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget.domain.budget import AttemptKind, RunStatus, Trigger
from dispatch_budget.domain.qualifying import Attempt
from dispatch_budget.domain.rounds import (
    ExtensionReceipt,
    LaunchRefusal,
    Outcome,
    Receipt,
    Run,
    RunModes,
    Settlement,
)
from dispatch_budget.store.tables import admissions, extensions, launch_refusals, round_scopes, runs

# --- runs ---


def _mode(value: str | None) -> ReviewMode | None:
    return ReviewMode(value) if value else None


def _run(row: Any) -> Run:
    return Run(
        run_id=row.run_id,
        repository=row.repository,
        pr_number=row.pr_number,
        head_sha=row.head_sha,
        status=RunStatus(row.status),
        scope_key=row.scope_key,
        modes=RunModes(
            _mode(row.review_mode), _mode(row.pr_work_review_mode), _mode(row.repeat_review_context_mode)
        ),
        review_sequence=tuple(dict(r) for r in row.review_sequence or ()),
        owner=row.created_by or "",
    )


def _run_columns(run: Run, at: datetime) -> dict[str, Any]:
    modes = run.modes
    return {
        "repository": run.repository,
        "pr_number": run.pr_number,
        "head_sha": run.head_sha,
        "status": run.status.value,
        "scope_key": run.scope_key,
        "updated_at": at,
        "review_mode": modes.review.value if modes.review else None,
        "pr_work_review_mode": modes.pr_work.value if modes.pr_work else None,
        "repeat_review_context_mode": modes.repeat_context.value if modes.repeat_context else None,
        "review_sequence": list(run.review_sequence) or None,
    }


async def get_run(conn: AsyncConnection, project_id: str, run_id: str) -> Run | None:
    row = (
        await conn.execute(select(runs).where(runs.c.project_id == project_id, runs.c.run_id == run_id))
    ).first()
    return _run(row) if row is not None else None


async def add_run(conn: AsyncConnection, project_id: str, run: Run, at: datetime) -> None:
    await conn.execute(
        runs.insert().values(
            project_id=project_id,
            run_id=run.run_id,
            created_by=run.owner or None,
            **_run_columns(run, at),
        )
    )


async def update_run(conn: AsyncConnection, project_id: str, run: Run, at: datetime) -> None:
    await conn.execute(
        update(runs)
        .where(runs.c.project_id == project_id, runs.c.run_id == run.run_id)
        .values(**_run_columns(run, at))
    )


# --- admission scopes ---


async def lock_scope(conn: AsyncConnection, project_id: str, key: str, default_limit: int) -> int:
    """Create the scope's owner row if needed and lock it; answers its limit. Admissions and grants
    on one scope serialize here (row lock on PostgreSQL, BEGIN IMMEDIATE on SQLite)."""
    await insert_new(
        conn, round_scopes, {"project_id": project_id, "scope_key": key, "round_limit": default_limit}
    )
    row = (
        await conn.execute(
            select(round_scopes.c.round_limit)
            .where(round_scopes.c.project_id == project_id, round_scopes.c.scope_key == key)
            .with_for_update()
        )
    ).one()
    return int(row.round_limit)


async def round_limit(conn: AsyncConnection, project_id: str, key: str) -> int | None:
    """The scope's limit, without locking it; None before its first admission or grant."""
    value = (
        await conn.execute(
            select(round_scopes.c.round_limit).where(
                round_scopes.c.project_id == project_id, round_scopes.c.scope_key == key
            )
        )
    ).scalar()
    return int(value) if value is not None else None


async def set_round_limit(conn: AsyncConnection, project_id: str, key: str, limit: int) -> None:
    await conn.execute(
        update(round_scopes)
        .where(round_scopes.c.project_id == project_id, round_scopes.c.scope_key == key)
        .values(round_limit=limit)
    )


async def move_to_scope(conn: AsyncConnection, project_id: str, old: str, new: str) -> None:
    """The admissions and grants of scope ``old`` now belong to ``new``."""
    for table in (admissions, extensions):
        await conn.execute(
            update(table)
            .where(table.c.project_id == project_id, table.c.scope_key == old)
            .values(scope_key=new)
        )


async def scope_counts(conn: AsyncConnection, project_id: str, key: str) -> tuple[int, int]:
    """(admissions, no-verdict settlements) in a scope."""
    row = (
        await conn.execute(
            select(
                func.count(),
                func.coalesce(func.sum((admissions.c.outcome == Outcome.NO_VERDICT.value).cast(Integer)), 0),
            ).where(admissions.c.project_id == project_id, admissions.c.scope_key == key)
        )
    ).one()
    return int(row[0]), int(row[1])


async def last_failures(conn: AsyncConnection, project_id: str, key: str, count: int = 3) -> list[str]:
    """The scope's latest no-verdict ends, newest first, as ``reason at time``."""
    rows = (
        await conn.execute(
            select(admissions.c.reason, admissions.c.settled_at)
            .where(
                admissions.c.project_id == project_id,
                admissions.c.scope_key == key,
                admissions.c.outcome == Outcome.NO_VERDICT.value,
            )
            .order_by(admissions.c.settled_at.desc())
            .limit(count)
        )
    ).all()
    return [f"{r.reason} at {r.settled_at.isoformat()}" for r in rows]


# --- admission receipts and settlements ---


def _receipt(row: Any) -> Receipt:
    return from_row(
        Receipt,
        row,
        kind=AttemptKind(row.kind),
        trigger=Trigger(row.trigger),
        selection=dict(row.selection),
        outcome=Outcome(row.outcome) if row.outcome is not None else None,
        admitted_by=row.admitted_by or "",
        review_session_id=row.review_session_id or "",
        journal_run_id=row.journal_run_id or "",
    )


async def admission(conn: AsyncConnection, project_id: str, receipt_id: str) -> Receipt | None:
    return await _admission_where(conn, project_id, admissions.c.receipt_id == receipt_id)


async def admission_for_attempt(conn: AsyncConnection, project_id: str, attempt_key: str) -> Receipt | None:
    return await _admission_where(conn, project_id, admissions.c.attempt_key == attempt_key)


async def _admission_where(
    conn: AsyncConnection, project_id: str, condition: ColumnElement[bool]
) -> Receipt | None:
    query = select(admissions).where(admissions.c.project_id == project_id, condition)
    row = (await conn.execute(query)).first()
    return _receipt(row) if row is not None else None


async def add_admission(conn: AsyncConnection, project_id: str, receipt: Receipt) -> None:
    await conn.execute(
        admissions.insert().values(
            receipt_id=receipt.receipt_id,
            project_id=project_id,
            scope_key=receipt.scope_key,
            run_id=receipt.run_id,
            attempt_key=receipt.attempt_key,
            kind=receipt.kind.value,
            trigger=receipt.trigger.value,
            head_sha=receipt.head_sha,
            selection=receipt.selection,
            admitted_at=receipt.admitted_at,
            round=receipt.round,
            admitted_by=receipt.admitted_by,
            review_session_id=receipt.review_session_id or None,
            outcome=None,
            reason=None,
            verdict=None,
            settled_at=None,
        )
    )


async def settle_admission(
    conn: AsyncConnection, receipt_id: str, prior: Outcome | None, settlement: Settlement, at: datetime
) -> Receipt:
    """Write the settlement over the ``prior`` one (compare-and-set); answers the receipt as it now is."""
    adm = admissions.c
    await conn.execute(
        update(admissions)
        .where(
            adm.receipt_id == receipt_id,
            adm.outcome.is_(None) if prior is None else adm.outcome == prior.value,
        )
        .values(
            outcome=settlement.outcome.value,
            reason=settlement.reason,
            verdict=settlement.verdict,
            settled_at=at,
            evidence=settlement.evidence,
            reviewed_head=settlement.reviewed_head,
            journal_run_id=settlement.journal_run_id or None,
            diff_scope=settlement.diff_scope,
        )
    )
    return _receipt((await conn.execute(select(admissions).where(adm.receipt_id == receipt_id))).one())


async def gate_attempts(
    conn: AsyncConnection, project_id: str, scope_key: str, head_sha: str
) -> list[Attempt]:
    """The scope's attempts admitted for ``head_sha``, or whose journal named it, oldest first: what the
    publication gate tallies (domain.qualifying)."""
    adm = admissions.c
    rows = (
        await conn.execute(
            select(admissions)
            .where(
                adm.project_id == project_id,
                adm.scope_key == scope_key,
                (adm.head_sha == head_sha) | (adm.reviewed_head == head_sha),
            )
            .order_by(adm.admitted_at, adm.receipt_id)
        )
    ).all()
    return [
        from_row(
            Attempt,
            row,
            kind=AttemptKind(row.kind),
            review_session_id=row.review_session_id or "",
            journal_run_id=row.journal_run_id or "",
        )
        for row in rows
    ]


# --- stopped launches ---


async def record_launch_refusal(
    conn: AsyncConnection, project_id: str, scope_key: str, refusal: LaunchRefusal
) -> None:
    columns = to_columns(refusal, project_id=project_id, scope_key=scope_key, trigger=refusal.trigger.value)
    await conn.execute(launch_refusals.insert().values(columns))


async def latest_launch_refusal(conn: AsyncConnection, project_id: str, key: str) -> LaunchRefusal | None:
    row = (
        await conn.execute(
            select(launch_refusals)
            .where(launch_refusals.c.project_id == project_id, launch_refusals.c.scope_key == key)
            .order_by(launch_refusals.c.id.desc())
            .limit(1)
        )
    ).first()
    if row is None:
        return None
    return from_row(LaunchRefusal, row, trigger=Trigger(row.trigger))


# --- extension receipts ---


@dataclass(frozen=True)
class Grant:
    """A stored grant: its receipt and the hash of the request that made it (idempotency)."""

    receipt: ExtensionReceipt
    request_hash: str


async def grant_for_key(conn: AsyncConnection, project_id: str, idempotency_key: str) -> Grant | None:
    ext = extensions.c
    row = (
        await conn.execute(
            select(ext.receipt, ext.request_hash).where(
                ext.project_id == project_id, ext.idempotency_key == idempotency_key
            )
        )
    ).first()
    return Grant(ExtensionReceipt.from_json(row.receipt), row.request_hash) if row is not None else None


async def add_grant(conn: AsyncConnection, project_id: str, grant: Grant) -> None:
    receipt = grant.receipt
    await conn.execute(
        extensions.insert().values(
            receipt_id=receipt.receipt_id,
            project_id=project_id,
            idempotency_key=receipt.idempotency_key,
            request_hash=grant.request_hash,
            scope_key=receipt.scope_key,
            receipt=receipt.to_json(),
            granted_at=receipt.granted_at,
        )
    )


async def latest_extension(conn: AsyncConnection, project_id: str, key: str) -> ExtensionReceipt | None:
    row = (
        await conn.execute(
            select(extensions.c.receipt)
            .where(extensions.c.project_id == project_id, extensions.c.scope_key == key)
            .order_by(extensions.c.granted_at.desc(), extensions.c.receipt_id.desc())
            .limit(1)
        )
    ).first()
    return ExtensionReceipt.from_json(row.receipt) if row is not None else None
