"""Appending nudges: the per-project append locks, the review heads, collapse keys, the per-event
append and the set-based one (issue 18), compaction, and the operators' reads of one review."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

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
from nudge.store.webhooks import Endpoint


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


# The projects' append locks on PostgreSQL: unnest yields the keys in the array's order and the lock is
# taken as each row comes, so one statement takes them in the order given. ``lock_projects`` runs it alone
# and ``begin_batch`` as its first CTE: one text, so both paths take the same locks.
_PROJECT_LOCKS = (
    "SELECT pg_advisory_xact_lock(hashtextextended(p, 0)) FROM unnest(CAST(:project_ids AS text[])) AS t(p)"
)
_LOCK_PROJECTS_PG = text(_PROJECT_LOCKS)


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


async def lock_head(conn: AsyncConnection, incoming: Incoming) -> Head:
    """The review's head row, created on its first nudge and locked for this transaction."""
    params = {
        "review_id": incoming.review_id,
        "org_id": incoming.org_id,
        "project_id": incoming.project_id,
        "agent_id": incoming.agent_id,
        "no_reasons": [],
    }
    return Head(*(await conn.execute(_LOCK_HEAD, params)).one())


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


# --- batched ingest on PostgreSQL (issue 18): a relay's batch in two statements ---------------------

# A batch's first statement: the project locks (sorted, so two batches queue), then, under them,
# the inbox dedupe and the heads' upsert-and-lock in review_id order, with the projects' webhook endpoints
# read beside. The cross join with ``locked`` makes both inserts wait for every lock: PostgreSQL has to
# read that CTE (and so run the locks) before its first row. The statement's snapshot is taken before the
# locks, which the heads do not mind: ON CONFLICT DO UPDATE locks and returns a row's latest version.
_BEGIN_BATCH = text(
    """
    WITH locks AS (
        """
    + _PROJECT_LOCKS
    + """
    ), locked AS (
        SELECT count(*) AS n FROM locks
    ), fresh AS (
        INSERT INTO inbox (event_id, received_at)
        SELECT event_id, :received_at FROM unnest(CAST(:event_ids AS text[])) AS e (event_id), locked
        ON CONFLICT DO NOTHING
        RETURNING event_id
    ), heads AS (
        INSERT INTO review_heads (review_id, org_id, project_id, agent_id, last_seq, terminal_reasons)
        SELECT review_id, org_id, project_id, agent_id, 0, CAST('[]' AS jsonb)
        FROM unnest(CAST(:review_ids AS text[]), CAST(:org_ids AS text[]), CAST(:head_projects AS text[]),
                    CAST(:agent_ids AS text[])) AS h (review_id, org_id, project_id, agent_id), locked
        ORDER BY review_id
        ON CONFLICT (review_id) DO UPDATE SET review_id = excluded.review_id
        RETURNING review_id, org_id, project_id, agent_id, last_seq, terminal_reasons
    )
    SELECT ARRAY(SELECT event_id FROM fresh) AS fresh,
           (SELECT json_agg(heads) FROM heads) AS heads,
           (SELECT json_agg(e ORDER BY e.created_at, e.id) FROM webhook_endpoints e
            WHERE e.project_id = ANY(CAST(:project_ids AS text[]))) AS endpoints
    """
).bindparams(bindparam("received_at", type_=UtcDateTime()))


class Head(NamedTuple):
    """A review's head row: its owner, last seq and terminal reasons."""

    review_id: str
    org_id: str
    project_id: str
    agent_id: str
    last_seq: int
    terminal_reasons: list[str]


@dataclass(frozen=True)
class Batch:
    """What a batch's first statement answers."""

    fresh: set[str]  # the event ids received for the first time (an id twice in the batch once)
    heads: dict[str, Head]  # review_id -> its head, locked
    endpoints: dict[tuple[str, str], list[Endpoint]]  # (org_id, project_id) -> its webhook endpoints


async def begin_batch(
    conn: AsyncConnection, event_ids: list[str], first: list[Incoming], received_at: datetime
) -> Batch:
    """Lock the projects of ``first`` (one incoming per review: its first), record ``event_ids`` as
    received, lock (creating) each review's head, and read the projects' webhook endpoints: one
    statement."""
    project_ids = sorted({i.project_id for i in first})
    row = (
        await conn.execute(
            _BEGIN_BATCH,
            {
                "project_ids": project_ids,
                "event_ids": event_ids,
                "received_at": received_at,
                "review_ids": [i.review_id for i in first],
                "org_ids": [i.org_id for i in first],
                "head_projects": [i.project_id for i in first],
                "agent_ids": [i.agent_id for i in first],
            },
        )
    ).one()
    owners = {(i.org_id, i.project_id) for i in first}
    endpoints: dict[tuple[str, str], list[Endpoint]] = {owner: [] for owner in owners}
    for e in _json(row.endpoints):
        if (owner := (e["org_id"], e["project_id"])) in endpoints:
            endpoints[owner].append(
                Endpoint(e["id"], *owner, e["url"], e["reasons"], datetime.fromisoformat(e["created_at"]))
            )
    heads = {h["review_id"]: Head(**h) for h in _json(row.heads)}
    return Batch(set(row.fresh), heads, endpoints)


def _json(value: str | list[Any] | None) -> list[Any]:
    """A ``json_agg`` as the driver gives it: text, or already decoded; NULL for no rows."""
    if value is None:
        return []
    return orjson.loads(value) if isinstance(value, str) else value


# append for a batch: the nudges in batch order (so ``pos`` follows it), their frontier rows, each
# head's advance, their webhook deliveries in order and one announcement per project, in one statement.
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
    ), deliveries AS (
        INSERT INTO webhook_deliveries
            (endpoint_id, event_id, reason, review_id, body, status, attempts, next_attempt_at, created_at)
        SELECT endpoint_id, event_id, reason, review_id, body, 'pending', 0, created_at, created_at
        FROM unnest(CAST(:d_endpoint_ids AS text[]), CAST(:d_event_ids AS text[]), CAST(:d_reasons AS text[]),
                    CAST(:d_review_ids AS text[]), CAST(:d_bodies AS text[]),
                    CAST(:d_created_ats AS timestamptz[]))
             WITH ORDINALITY AS d (endpoint_id, event_id, reason, review_id, body, created_at, ord)
        ORDER BY ord
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
    conn: AsyncConnection,
    added: list[Appended],
    heads: dict[str, tuple[int, list[str]]],
    deliveries: list[dict[str, Any]],
) -> None:
    """``append`` for a batch on PostgreSQL: ``added`` in order, then each head of ``heads``
    (review_id -> (last seq, terminal reasons)) advanced, the webhook ``deliveries`` (rows as
    ``enqueue_deliveries`` takes them) queued in order, each project announced once on commit."""
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
            "d_endpoint_ids": [d["endpoint_id"] for d in deliveries],
            "d_event_ids": [d["event_id"] for d in deliveries],
            "d_reasons": [d["reason"] for d in deliveries],
            "d_review_ids": [d["review_id"] for d in deliveries],
            "d_bodies": [d["body"] for d in deliveries],
            "d_created_ats": [d["created_at"] for d in deliveries],
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
