"""The review-run gate (spec 001): per-session counters and the decision log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reviewloop.records import from_row, to_columns
from reviewloop.storage.schema import insert_new
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget.domain.gate import GateRecord, SessionState
from dispatch_budget.store.documents import ProjectDocument
from dispatch_budget.store.tables import agent_sessions, gate_configs, gate_decisions


async def lock_agent_session(conn: AsyncConnection, project_id: str, session_id: str) -> SessionState:
    """The session's counters (fresh ones for a new session), locked until the transaction ends."""
    fresh = to_columns(SessionState(), project_id=project_id, session_id=session_id)
    await insert_new(conn, agent_sessions, fresh)
    a = agent_sessions.c
    row = (
        await conn.execute(
            select(agent_sessions)
            .where(a.project_id == project_id, a.session_id == session_id)
            .with_for_update()
        )
    ).one()
    return from_row(SessionState, row)


async def save_agent_session(
    conn: AsyncConnection, project_id: str, session_id: str, state: SessionState
) -> None:
    a = agent_sessions.c
    await conn.execute(
        update(agent_sessions)
        .where(a.project_id == project_id, a.session_id == session_id)
        .values(to_columns(state))
    )


async def log_gate_decision(conn: AsyncConnection, project_id: str, record: GateRecord) -> None:
    await conn.execute(
        gate_decisions.insert().values(
            project_id=project_id, session_id=record.session, record=record.to_json(), at=record.at
        )
    )


async def gate_decision_page(
    conn: AsyncConnection, project_id: str, *, session_id: str, after: int, limit: int
) -> tuple[list[GateRecord], int | None]:
    """Up to ``limit`` decisions logged after id ``after``, oldest first, and the id the next page
    starts after (None on the last page)."""
    g = gate_decisions.c
    query = select(g.id, g.record).where(g.project_id == project_id, g.id > after)
    if session_id:
        query = query.where(g.session_id == session_id)
    rows = (await conn.execute(query.order_by(g.id).limit(limit + 1))).all()
    more = int(rows[limit - 1].id) if len(rows) > limit else None
    return [GateRecord.from_json(row.record) for row in rows[:limit]], more


# The project's gate settings an admin stored; empty: the environment's defaults throughout.
gate_overrides = ProjectDocument(gate_configs)


async def link_in_flight_receipt(
    conn: AsyncConnection, project_id: str, session_id: str, receipt_id: str
) -> bool:
    """Tie an admitted attempt to the session's review in flight, so its timeout settles it."""
    a = agent_sessions.c
    result = await conn.execute(
        update(agent_sessions)
        .where(a.project_id == project_id, a.session_id == session_id, a.in_flight.is_(True))
        .values(in_flight_receipt=receipt_id)
    )
    return bool(result.rowcount)


@dataclass(frozen=True)
class InFlight:
    """A session's review in flight, as the timeout sweep saw it."""

    project_id: str
    session_id: str
    since: datetime
    receipt: str | None


async def reviews_in_flight(conn: AsyncConnection) -> list[InFlight]:
    """Every review in flight, oldest first (a session has at most one, so these are few)."""
    a = agent_sessions.c
    rows = (
        await conn.execute(
            select(a.project_id, a.session_id, a.in_flight_since, a.in_flight_receipt)
            .where(a.in_flight_since.is_not(None), a.in_flight.is_(True))
            .order_by(a.in_flight_since)
        )
    ).all()
    return [InFlight(r.project_id, r.session_id, r.in_flight_since, r.in_flight_receipt) for r in rows]


async def end_in_flight(conn: AsyncConnection, seen: InFlight) -> bool:
    """End the review in flight as ``after_review(succeeded=False)`` does, if it is still the one
    ``seen`` (compare-and-set on its start and receipt): of two sweeps, or a sweep and the session's
    own call, one ends it. True: this call ended it."""
    a = agent_sessions.c
    result = await conn.execute(
        update(agent_sessions)
        .where(
            a.project_id == seen.project_id,
            a.session_id == seen.session_id,
            a.in_flight.is_(True),
            a.in_flight_since == seen.since,
            a.in_flight_receipt.is_(None) if seen.receipt is None else a.in_flight_receipt == seen.receipt,
        )
        .values(in_flight=False, in_flight_since=None, in_flight_receipt=None)
    )
    return bool(result.rowcount)
