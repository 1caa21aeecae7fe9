"""The nudge store: nudges, the un-acked frontier, one head row per review (tenant, last seq,
terminal reasons), and the collapse keys. Heads and collapse keys are never compacted, so the
terminal guarantee and the ``front_run_next`` collapse outlive the nudges they guard."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from reviewloop.storage import Database
from reviewloop.storage.schema import BigId, Json, UtcDateTime, insert_ignore, new_metadata
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Index,
    Row,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    case,
    delete,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge.domain.payloads import Incoming

metadata = new_metadata()

# The PostgreSQL channel a committed nudge is announced on; its payload is the nudge's project_id.
NOTIFY_CHANNEL = "reviewloop_nudge"

nudges = Table(
    "nudges",
    metadata,
    # Arrival order: "oldest first" across reviews, and the keyset cursor. Ingests of one project
    # commit in pos order (see lock_project), so a cursor never skips a later-committing row.
    Column("pos", BigId, primary_key=True, autoincrement=True),
    Column("id", String(40), nullable=False),
    Column("review_id", String(40), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("reason", String(40), nullable=False),
    Column("payload", Text, nullable=False),
    Column("category_id", String(40), nullable=False, server_default=""),
    Column("created_at", UtcDateTime, nullable=False),
    UniqueConstraint("review_id", "seq"),
    Index("ix_nudges_created_at", "created_at"),
)

# The un-acked frontier: one row per nudge not yet acked. An ack deletes rows here (nudges stay until
# compaction), so a drain reads and deletes a queue that holds only live work, whatever the backlog
# of acked nudges awaiting compaction.
unacked = Table(
    "unacked",
    metadata,
    Column("pos", BigId, primary_key=True, autoincrement=False),
    Column("review_id", String(40), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    UniqueConstraint("review_id", "seq"),
    Index("ix_unacked_project_agent_pos", "project_id", "agent_id", "pos"),
    Index("ix_unacked_project_pos", "project_id", "pos"),
)

review_heads = Table(
    "review_heads",
    metadata,
    Column("review_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("terminal_reasons", Json, nullable=False),
    Index("ix_review_heads_project_agent", "project_id", "agent_id"),
)

collapse_keys = Table(
    "collapse_keys",
    metadata,
    Column("collapse_key", String(200), primary_key=True),
    Column("review_id", String(40), nullable=False),
    Column("seq", BigInteger, nullable=False),
)


@dataclass(frozen=True)
class Nudge:
    """A stored nudge as its reader gets it."""

    pos: int
    seq: int
    id: str
    reason: str
    review_id: str
    category_id: str
    # The stored JSON object, passed through as text: the servicer never re-encodes it.
    payload_json: str
    created_at: datetime

    @property
    def payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = orjson.loads(self.payload_json)
        return payload


def _nudge(row: Row[Any]) -> Nudge:
    return Nudge(
        pos=row.pos,
        seq=row.seq,
        id=row.id,
        reason=row.reason,
        review_id=row.review_id,
        category_id=row.category_id,
        payload_json=row.payload,
        created_at=row.created_at,
    )


@contextlib.asynccontextmanager
async def one_statement(db: Database) -> AsyncIterator[AsyncConnection]:
    """A connection for work that is one statement, atomic by itself. On PostgreSQL it runs in
    autocommit, two round trips fewer than BEGIN ... COMMIT (every long-poll wake, drain page and ack
    pays them); SQLite keeps its BEGIN IMMEDIATE."""
    if db.is_sqlite:
        async with db.transaction() as uow:
            yield uow.conn
        return
    async with db.engine.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")


def visible_to(principal: Principal) -> ColumnElement[bool]:
    """An agent sees the nudges of reviews it composed in its project; other actors see their project's."""
    condition = and_(
        review_heads.c.org_id == principal.org_id, review_heads.c.project_id == principal.project_id
    )
    if principal.actor_kind is ActorKind.AGENT:
        condition = and_(condition, review_heads.c.agent_id == principal.actor_id)
    return condition


async def lock_project(conn: AsyncConnection, project_id: str) -> None:
    """On PostgreSQL, serialize one project's appends until commit, so ``pos`` commits in order
    within a project (SQLite's ``BEGIN IMMEDIATE`` already serializes every writer)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:project_id, 0))"), {"project_id": project_id}
        )


async def lock_head(conn: AsyncConnection, incoming: Incoming) -> Row[Any]:
    """The review's head row, created on its first nudge and locked for this transaction."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    upsert = dialect.insert(review_heads).values(
        review_id=incoming.review_id,
        org_id=incoming.org_id,
        project_id=incoming.project_id,
        agent_id=incoming.agent_id,
        last_seq=0,
        terminal_reasons=[],
    )
    # DO UPDATE (a no-op write) rather than DO NOTHING: it locks the row and returns it either way.
    upsert = upsert.on_conflict_do_update(
        index_elements=[review_heads.c.review_id],
        set_={"review_id": upsert.excluded.review_id},
    ).returning(*review_heads.c)
    return (await conn.execute(upsert)).one()


async def claim_collapse_key(conn: AsyncConnection, key: str, review_id: str, seq: int) -> bool:
    """Record ``key`` for the nudge about to take ``seq``; False when an earlier nudge holds it."""
    result = await conn.execute(
        insert_ignore(conn, collapse_keys).values(collapse_key=key, review_id=review_id, seq=seq)
    )
    return bool(result.rowcount == 1)


async def append(
    conn: AsyncConnection,
    incoming: Incoming,
    *,
    nudge_id: str,
    seq: int,
    terminal_reasons: list[str],
    created_at: datetime,
) -> None:
    """Insert the review's next nudge, advance its head, and (PostgreSQL) announce it on commit."""
    inserted = await conn.execute(
        insert(nudges)
        .values(
            id=nudge_id,
            review_id=incoming.review_id,
            seq=seq,
            reason=incoming.reason.value,
            payload=orjson.dumps(incoming.payload).decode(),
            category_id=incoming.category_id,
            created_at=created_at,
        )
        .returning(nudges.c.pos)
    )
    await conn.execute(
        insert(unacked).values(
            pos=inserted.scalar_one(),
            review_id=incoming.review_id,
            seq=seq,
            org_id=incoming.org_id,
            project_id=incoming.project_id,
            agent_id=incoming.agent_id,
        )
    )
    await conn.execute(
        update(review_heads)
        .where(review_heads.c.review_id == incoming.review_id)
        .values(last_seq=seq, terminal_reasons=terminal_reasons)
    )
    if conn.dialect.name == "postgresql":
        # Delivered to every listener when (and only if) this transaction commits.
        await conn.execute(
            text("SELECT pg_notify(:channel, :project_id)"),
            {"channel": NOTIFY_CHANNEL, "project_id": incoming.project_id},
        )


async def unacked_nudges(
    conn: AsyncConnection, principal: Principal, *, after: int, limit: int
) -> list[Nudge]:
    """Up to ``limit`` un-acked nudges visible to ``principal`` with ``pos > after``, oldest first."""
    scope = and_(unacked.c.org_id == principal.org_id, unacked.c.project_id == principal.project_id)
    if principal.actor_kind is ActorKind.AGENT:
        scope = and_(scope, unacked.c.agent_id == principal.actor_id)
    query = (
        select(nudges)
        .join(unacked, unacked.c.pos == nudges.c.pos)
        .where(scope, unacked.c.pos > after)
        .order_by(unacked.c.pos)
        .limit(limit)
    )
    return [_nudge(row) for row in await conn.execute(query)]


async def heads_of(conn: AsyncConnection, principal: Principal, review_ids: list[str]) -> dict[str, int]:
    """``review_id -> last_seq`` for those of ``review_ids`` the principal may see."""
    rows = await conn.execute(
        select(review_heads.c.review_id, review_heads.c.last_seq).where(
            review_heads.c.review_id.in_(review_ids), visible_to(principal)
        )
    )
    return {r.review_id: r.last_seq for r in rows}


# advance_cursors on PostgreSQL: the acks travel as two arrays, so the statement text and its plan
# are the same for every call, with no per-ack bind parameters to build (a drain's hot path).
_ADVANCE_PG = text(
    """
    WITH acks AS (
        SELECT * FROM unnest(CAST(:review_ids AS text[]), CAST(:seqs AS bigint[])) AS a(review_id, seq)
    ), valid AS (
        SELECT count(*) AS n FROM acks JOIN review_heads h ON h.review_id = acks.review_id
        WHERE h.org_id = :org_id AND h.project_id = :project_id
          AND (:agent_id = '' OR h.agent_id = :agent_id) AND h.last_seq >= acks.seq
    )
    DELETE FROM unacked USING acks
    WHERE unacked.review_id = acks.review_id AND unacked.seq <= acks.seq
      AND (SELECT n FROM valid) = :count
    """
)


async def advance_cursors(conn: AsyncConnection, principal: Principal, acks: dict[str, int]) -> int:
    """Move each review's ack cursor forward to its seq (every nudge of the review up to it leaves the
    un-acked frontier) if, and only if, every review is visible to ``principal`` and every seq is
    within its head: all or nothing, in one statement. What is acked stays acked, so a cursor never
    moves back. Returns how many nudges this acked (0 when refused, or when all were acked already)."""
    review_ids = list(acks)
    if conn.dialect.name == "postgresql":
        result = await conn.execute(
            _ADVANCE_PG,
            {
                "review_ids": review_ids,
                "seqs": list(acks.values()),
                "org_id": principal.org_id,
                "project_id": principal.project_id,
                # The same visibility as visible_to(): an agent acks only reviews it composed.
                "agent_id": principal.actor_id if principal.actor_kind is ActorKind.AGENT else "",
                "count": len(acks),
            },
        )
        return int(result.rowcount or 0)
    all_valid = (
        select(func.count())
        .where(
            review_heads.c.review_id.in_(review_ids),
            visible_to(principal),
            review_heads.c.last_seq >= case(acks, value=review_heads.c.review_id),
        )
        .scalar_subquery()
    )
    result = await conn.execute(
        delete(unacked).where(
            unacked.c.review_id.in_(review_ids),
            unacked.c.seq <= case(acks, value=unacked.c.review_id),
            all_valid == len(acks),
        )
    )
    return int(result.rowcount or 0)


async def compact(conn: AsyncConnection, created_before: datetime) -> int:
    """Delete acked nudges created before ``created_before``; un-acked nudges are never dropped."""
    still_unacked = select(unacked.c.pos).where(unacked.c.pos == nudges.c.pos).exists()
    result = await conn.execute(delete(nudges).where(nudges.c.created_at < created_before, ~still_unacked))
    return int(result.rowcount or 0)


async def review_log(conn: AsyncConnection, review_id: str) -> list[Row[Any]]:
    """Every stored nudge of one review, acked or not, in seq order (operators and tests)."""
    query = select(nudges).where(nudges.c.review_id == review_id).order_by(nudges.c.seq)
    return list((await conn.execute(query)).all())


async def head(conn: AsyncConnection, review_id: str) -> Row[Any] | None:
    return (await conn.execute(select(review_heads).where(review_heads.c.review_id == review_id))).first()
