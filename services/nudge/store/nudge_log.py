"""Appending nudges: the per-project append locks, the review heads, collapse keys, the per-event
append and the set-based one (issue 18), compaction, and the operators' reads of one review."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from reviewloop.storage.schema import Json, UtcDateTime, insert_new
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import (
    ColumnElement,
    Row,
    and_,
    bindparam,
    delete,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge.domain.payloads import Incoming
from nudge.store.tables import (
    NOTIFY_CHANNEL,
    broadcast_acks,
    broadcasts,
    collapse_keys,
    nudges,
    review_heads,
    unacked,
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
    # The review's agent; on a broadcast, the one agent it names ("" for every agent).
    agent_id: str = ""

    @property
    def payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = orjson.loads(self.payload_json)
        return payload


def visible_to(principal: Principal) -> ColumnElement[bool]:
    """An agent sees the nudges of reviews it composed in its project; other actors see their project's."""
    condition = and_(
        review_heads.c.org_id == principal.org_id, review_heads.c.project_id == principal.project_id
    )
    if principal.actor_kind is ActorKind.AGENT:
        condition = and_(condition, review_heads.c.agent_id == principal.actor_id)
    return condition


# lock_projects on PostgreSQL: unnest yields the keys in the array's order and the lock is taken as
# each row comes, so one statement takes them in the order given.
_LOCK_PROJECTS_PG = text(
    "SELECT pg_advisory_xact_lock(hashtextextended(p, 0)) FROM unnest(CAST(:project_ids AS text[])) AS t(p)"
)


async def lock_projects(conn: AsyncConnection, project_ids: list[str]) -> None:
    """On PostgreSQL, serialize each project's appends until commit, so ``pos`` commits in order within a
    project (SQLite's ``BEGIN IMMEDIATE`` already serializes every writer). Taken in the order given, in
    one statement: callers give them sorted, so two batches naming the same projects queue, never
    deadlock."""
    if conn.dialect.name == "postgresql" and project_ids:
        await conn.execute(_LOCK_PROJECTS_PG, {"project_ids": project_ids})


# lock_head's upsert as text, the same on PostgreSQL and SQLite: SQLAlchemy never caches a dialect's
# INSERT ... ON CONFLICT, and compiling this one cost ~1 ms per nudge. DO UPDATE (a no-op write) rather
# than DO NOTHING: it locks the row and returns it either way.
_LOCK_HEAD = (
    text(
        """
        INSERT INTO review_heads (review_id, org_id, project_id, agent_id, last_seq, terminal_reasons)
        VALUES (:review_id, :org_id, :project_id, :agent_id, 0, :no_reasons)
        ON CONFLICT (review_id) DO UPDATE SET review_id = excluded.review_id
        RETURNING review_id, org_id, project_id, agent_id, last_seq, terminal_reasons
        """
    )
    .bindparams(bindparam("no_reasons", type_=Json))
    .columns(*review_heads.c)
)


async def lock_head(conn: AsyncConnection, incoming: Incoming) -> Row[Any]:
    """The review's head row, created on its first nudge and locked for this transaction."""
    params = {
        "review_id": incoming.review_id,
        "org_id": incoming.org_id,
        "project_id": incoming.project_id,
        "agent_id": incoming.agent_id,
        "no_reasons": [],
    }
    return (await conn.execute(_LOCK_HEAD, params)).one()


async def claim_collapse_key(conn: AsyncConnection, key: str, review_id: str, seq: int) -> bool:
    """Record ``key`` for the nudge about to take ``seq``; False when an earlier nudge holds it."""
    result = await insert_new(conn, collapse_keys, {"collapse_key": key, "review_id": review_id, "seq": seq})
    return bool(result.rowcount == 1)


# append on PostgreSQL: the nudge, its frontier row, the head's advance and the announcement in one
# statement (one round trip instead of four); SQLite runs the same steps one statement each.
_APPEND_PG = text(
    """
    WITH added AS (
        INSERT INTO nudges (id, review_id, seq, reason, payload, category_id, created_at)
        VALUES (:id, :review_id, :seq, :reason, :payload, :category_id, :created_at)
        RETURNING pos, review_id, seq
    ), frontier AS (
        INSERT INTO unacked (pos, review_id, seq, org_id, project_id, agent_id)
        SELECT pos, review_id, seq, :org_id, :project_id, :agent_id FROM added
    ), head AS (
        UPDATE review_heads SET last_seq = :seq, terminal_reasons = :terminal_reasons
        WHERE review_id = :review_id
    )
    SELECT pg_notify(:channel, :project_id)
    """
).bindparams(bindparam("created_at", type_=UtcDateTime()), bindparam("terminal_reasons", type_=Json))


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
    nudge = {
        "id": nudge_id,
        "review_id": incoming.review_id,
        "seq": seq,
        "reason": incoming.reason.value,
        "payload": orjson.dumps(incoming.payload).decode(),
        "category_id": incoming.category_id,
        "created_at": created_at,
    }
    owner = {"org_id": incoming.org_id, "project_id": incoming.project_id, "agent_id": incoming.agent_id}
    if conn.dialect.name == "postgresql":
        # The announcement is delivered to every listener when (and only if) this transaction commits.
        await conn.execute(
            _APPEND_PG,
            {**nudge, **owner, "terminal_reasons": terminal_reasons, "channel": NOTIFY_CHANNEL},
        )
        return
    inserted = await conn.execute(insert(nudges).values(**nudge).returning(nudges.c.pos))
    await conn.execute(
        insert(unacked).values(pos=inserted.scalar_one(), review_id=incoming.review_id, seq=seq, **owner)
    )
    await conn.execute(
        update(review_heads)
        .where(review_heads.c.review_id == incoming.review_id)
        .values(last_seq=seq, terminal_reasons=terminal_reasons)
    )


# --- batched ingest on PostgreSQL (issue 18): a relay's batch in a handful of statements -------------

_FIRST_DELIVERIES = text(
    """
    INSERT INTO inbox (event_id, received_at)
    SELECT event_id, :received_at FROM unnest(CAST(:event_ids AS text[])) AS e (event_id)
    ON CONFLICT DO NOTHING
    RETURNING event_id
    """
).bindparams(bindparam("received_at", type_=UtcDateTime()))


async def first_deliveries(conn: AsyncConnection, event_ids: list[str], received_at: datetime) -> set[str]:
    """Record the batch's event ids as received in one statement; those received before are not
    returned (an id twice in the batch is returned once: its repeat is the caller's to skip)."""
    result = await conn.execute(_FIRST_DELIVERIES, {"event_ids": event_ids, "received_at": received_at})
    return set(result.scalars())


# lock_head for many reviews at once, in review_id order (two batches lock shared heads in one order).
_LOCK_HEADS = text(
    """
    INSERT INTO review_heads (review_id, org_id, project_id, agent_id, last_seq, terminal_reasons)
    SELECT review_id, org_id, project_id, agent_id, 0, CAST('[]' AS jsonb)
    FROM unnest(CAST(:review_ids AS text[]), CAST(:org_ids AS text[]), CAST(:project_ids AS text[]),
                CAST(:agent_ids AS text[])) AS h (review_id, org_id, project_id, agent_id)
    ORDER BY review_id
    ON CONFLICT (review_id) DO UPDATE SET review_id = excluded.review_id
    RETURNING review_id, org_id, project_id, agent_id, last_seq, terminal_reasons
    """
).columns(*review_heads.c)


async def lock_heads(conn: AsyncConnection, first: list[Incoming]) -> dict[str, Row[Any]]:
    """``lock_head`` of each review of ``first`` (one incoming per review: its first), in one statement."""
    params = {
        "review_ids": [i.review_id for i in first],
        "org_ids": [i.org_id for i in first],
        "project_ids": [i.project_id for i in first],
        "agent_ids": [i.agent_id for i in first],
    }
    return {row.review_id: row for row in await conn.execute(_LOCK_HEADS, params)}


# append for a batch: the nudges in batch order (so ``pos`` follows it), their frontier rows, each
# head's advance and one announcement per project, in one statement.
_APPEND_MANY_PG = text(
    """
    WITH added AS (
        INSERT INTO nudges (id, review_id, seq, reason, payload, category_id, created_at)
        SELECT id, review_id, seq, reason, payload, category_id, created_at
        FROM unnest(CAST(:ids AS text[]), CAST(:review_ids AS text[]), CAST(:seqs AS bigint[]),
                    CAST(:reasons AS text[]), CAST(:payloads AS text[]), CAST(:category_ids AS text[]),
                    CAST(:created_ats AS timestamptz[]))
             WITH ORDINALITY AS n (id, review_id, seq, reason, payload, category_id, created_at, ord)
        ORDER BY ord
        RETURNING pos, review_id, seq
    ), frontier AS (
        INSERT INTO unacked (pos, review_id, seq, org_id, project_id, agent_id)
        SELECT added.pos, added.review_id, added.seq, h.org_id, h.project_id, h.agent_id
        FROM added JOIN review_heads h ON h.review_id = added.review_id
    ), head AS (
        UPDATE review_heads SET last_seq = a.last_seq, terminal_reasons = CAST(a.terminal_reasons AS jsonb)
        FROM unnest(CAST(:head_ids AS text[]), CAST(:last_seqs AS bigint[]), CAST(:terminals AS text[]))
             AS a (review_id, last_seq, terminal_reasons)
        WHERE review_heads.review_id = a.review_id
    )
    SELECT pg_notify(:channel, p) FROM unnest(CAST(:projects AS text[])) AS p
    """
)


@dataclass(frozen=True)
class Appended:
    """One nudge of a batch, as ``append_many`` stores it."""

    incoming: Incoming
    nudge_id: str
    seq: int
    created_at: datetime


async def append_many(
    conn: AsyncConnection, added: list[Appended], heads: dict[str, tuple[int, list[str]]]
) -> None:
    """``append`` for a batch on PostgreSQL: ``added`` in order, then each head of ``heads``
    (review_id -> (last seq, terminal reasons)) advanced, each project announced once on commit."""
    await conn.execute(
        _APPEND_MANY_PG,
        {
            "ids": [a.nudge_id for a in added],
            "review_ids": [a.incoming.review_id for a in added],
            "seqs": [a.seq for a in added],
            "reasons": [a.incoming.reason.value for a in added],
            "payloads": [orjson.dumps(a.incoming.payload).decode() for a in added],
            "category_ids": [a.incoming.category_id for a in added],
            "created_ats": [a.created_at for a in added],
            "head_ids": list(heads),
            "last_seqs": [seq for seq, _ in heads.values()],
            "terminals": [orjson.dumps(reasons).decode() for _, reasons in heads.values()],
            "channel": NOTIFY_CHANNEL,
            "projects": sorted({a.incoming.project_id for a in added}),
        },
    )


async def compact(conn: AsyncConnection, created_before: datetime) -> int:
    """Delete acked nudges created before ``created_before``; un-acked nudges are never dropped.
    Broadcasts (and their acks) older than that go whoever acked them: they tell of a change, and the
    review nudges that carry the guarantees stay."""
    still_unacked = select(unacked.c.pos).where(unacked.c.pos == nudges.c.pos).exists()
    result = await conn.execute(delete(nudges).where(nudges.c.created_at < created_before, ~still_unacked))
    old = select(broadcasts.c.pos).where(broadcasts.c.created_at < created_before)
    await conn.execute(delete(broadcast_acks).where(broadcast_acks.c.broadcast_pos.in_(old)))
    await conn.execute(delete(broadcasts).where(broadcasts.c.created_at < created_before))
    return int(result.rowcount or 0)


async def review_log(conn: AsyncConnection, review_id: str) -> list[Row[Any]]:
    """Every stored nudge of one review, acked or not, in seq order (operators and tests)."""
    query = select(nudges).where(nudges.c.review_id == review_id).order_by(nudges.c.seq)
    return list((await conn.execute(query)).all())


async def head(conn: AsyncConnection, review_id: str) -> Row[Any] | None:
    return (await conn.execute(select(review_heads).where(review_heads.c.review_id == review_id))).first()
