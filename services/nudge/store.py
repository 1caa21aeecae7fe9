"""The nudge store: nudges, the un-acked frontier, one head row per review (tenant, last seq,
terminal reasons), and the collapse keys. Heads and collapse keys are never compacted, so the
terminal guarantee and the ``front_run_next`` collapse outlive the nudges they guard."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from reviewloop.storage.schema import BigId, Json, UtcDateTime, insert_new, new_metadata
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    CompoundSelect,
    Index,
    Integer,
    Row,
    Select,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge.domain.payloads import Broadcast, Incoming

metadata = new_metadata()

# The PostgreSQL channel a committed nudge is announced on; its payload is the nudge's project_id.
NOTIFY_CHANNEL = "reviewloop_nudge"

nudges = Table(
    "nudges",
    metadata,
    # Arrival order: "oldest first" across reviews, and the keyset cursor. Ingests of one project
    # commit in pos order (see lock_projects), so a cursor never skips a later-committing row.
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

# --- broadcasts (issue 15) ----------------------------------------------------------------------------

# Project-wide nudges (``seq`` 0, no review): stored once, shown to every agent they name until that
# agent acks them (``broadcast_acks``). ``project_id`` "" reaches every project of the org, ``agent_id``
# "" every agent. ``pos`` orders them; appends take the org's lock (``lock_broadcasts``), so they commit
# in ``pos`` order and a cursor never skips a later-committing row.
broadcasts = Table(
    "broadcasts",
    metadata,
    Column("pos", BigId, primary_key=True, autoincrement=True),
    Column("id", String(40), nullable=False, unique=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    Column("reason", String(40), nullable=False),
    Column("category_id", String(40), nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_broadcasts_org_project_pos", "org_id", "project_id", "pos"),
    Index("ix_broadcasts_created_at", "created_at"),
)

# Who is done with which broadcast: one row per (broadcast, acking principal).
broadcast_acks = Table(
    "broadcast_acks",
    metadata,
    Column("broadcast_pos", BigId, primary_key=True, autoincrement=False),
    Column("actor_id", String(40), primary_key=True),
)

# --- webhooks (issue 19) ------------------------------------------------------------------------------

# An admin's endpoint of a project. ``lease_until`` is the delivery claim: one replica at a time sends to
# an endpoint, in order; a replica that dies holding it loses it when it expires.
webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("url", Text, nullable=False),
    Column("reasons", Json, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("lease_until", UtcDateTime),
    Index("ix_webhook_endpoints_project", "project_id"),
)

# The versions of an endpoint's signing secret: only the salt each is derived with (domain.webhooks).
# ``expires_at`` is null for the current one; a rotated-out one signs until its overlap ends.
webhook_secrets = Table(
    "webhook_secrets",
    metadata,
    Column("endpoint_id", String(40), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("salt", String(64), nullable=False),
    # Which webhook key the secret is derived with (domain.webhooks.key_id), so a changed key is noticed.
    Column("key_id", String(16), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime),
)

# The durable delivery queue: one row per (endpoint, nudge), written in the nudge's own transaction.
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("pos", BigId, primary_key=True, autoincrement=True),
    Column("endpoint_id", String(40), nullable=False),
    Column("event_id", String(40), nullable=False),
    Column("reason", String(40), nullable=False),
    Column("review_id", String(40), nullable=False),
    Column("body", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=False),
    Column("last_status", Integer),
    Column("last_error", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
    UniqueConstraint("endpoint_id", "event_id"),
    Index("ix_webhook_deliveries_due", "status", "endpoint_id", "pos"),
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


def _unacked_nudges(*, agent: bool, one_review: bool) -> Select[Any]:
    """Up to ``:limit`` un-acked nudges of ``:org_id``/``:project_id`` (an agent's: ``:agent_id``'s) with
    ``pos > :after``, oldest first (only ``:review_id``'s when ``one_review``), in ``_FRONT_COLUMNS``."""
    scope = and_(unacked.c.org_id == bindparam("org_id"), unacked.c.project_id == bindparam("project_id"))
    if agent:
        scope = and_(scope, unacked.c.agent_id == bindparam("agent_id"))
    if one_review:
        scope = and_(scope, unacked.c.review_id == bindparam("review_id"))
    return (
        select(*(nudges.c[name] for name in _FRONT_COLUMNS[:-1]), unacked.c.agent_id)
        .join(unacked, unacked.c.pos == nudges.c.pos)
        .where(scope, unacked.c.pos > bindparam("after", type_=BigInteger))
        .order_by(unacked.c.pos)
        .limit(bindparam("limit", type_=Integer))
    )


# The order of Nudge's fields, so a row is a Nudge's arguments as they come.
_FRONT_COLUMNS = (
    "pos",
    "seq",
    "id",
    "reason",
    "review_id",
    "category_id",
    "payload",
    "created_at",
    "agent_id",
)


def _unacked_broadcasts(*, agent: bool) -> Select[Any]:
    """Up to ``:limit`` broadcasts visible to the caller (``:org_id``, ``:project_id``; an agent's: to
    ``:agent_id``) that ``:actor_id`` has not acked, with ``pos > :after_broadcast``, oldest first, in
    ``_FRONT_COLUMNS``: as nudges with ``seq`` 0 and no review."""
    acked = (
        select(broadcast_acks.c.broadcast_pos)
        .where(
            broadcast_acks.c.broadcast_pos == broadcasts.c.pos,
            broadcast_acks.c.actor_id == bindparam("actor_id"),
        )
        .exists()
    )
    visible = and_(
        broadcasts.c.org_id == bindparam("org_id"),
        broadcasts.c.project_id.in_([bindparam("project_id"), literal("")]),
    )
    if agent:
        visible = and_(visible, broadcasts.c.agent_id.in_([bindparam("agent_id"), literal("")]))
    return (
        select(
            broadcasts.c.pos,
            literal(0, BigInteger).label("seq"),
            broadcasts.c.id,
            broadcasts.c.reason,
            literal("", String).label("review_id"),
            broadcasts.c.category_id,
            broadcasts.c.payload,
            broadcasts.c.created_at,
            broadcasts.c.agent_id,
        )
        .where(visible, broadcasts.c.pos > bindparam("after_broadcast", type_=BigInteger), ~acked)
        .order_by(broadcasts.c.pos)
        .limit(bindparam("limit", type_=Integer))
    )


def _front_statement(*, agent: bool, one_review: bool) -> Select[Any] | CompoundSelect[Any]:
    """The read of the un-acked front: the nudges, and (not for one review: broadcasts belong to none)
    the broadcasts after ``:after_broadcast`` too, in one statement."""
    query: Select[Any] | CompoundSelect[Any] = _unacked_nudges(agent=agent, one_review=one_review)
    if not one_review:
        query = union_all(select(query.subquery()), select(_unacked_broadcasts(agent=agent).subquery()))
    return query


# Built once for each shape: a drain's read builds no statement and walks no cache key.
_FRONT = {
    (agent, one_review): _front_statement(agent=agent, one_review=one_review)
    for agent in (False, True)
    for one_review in (False, True)
}


async def unacked_front(
    conn: AsyncConnection,
    principal: Principal,
    *,
    after: int,
    after_broadcast: int,
    limit: int,
    review_id: str = "",
) -> tuple[list[Nudge], list[Nudge]]:
    """Up to ``limit`` un-acked nudges (``pos > after``) and up to ``limit`` un-acked broadcasts
    (``pos > after_broadcast``) visible to ``principal``, each oldest first, read in one statement. With
    ``review_id``, only that review's nudges (a review's drain has no broadcasts: they belong to none)."""
    agent = principal.actor_kind is ActorKind.AGENT
    params: dict[str, Any] = {
        "org_id": principal.org_id,
        "project_id": principal.project_id,
        "after": after,
        "limit": limit,
    }
    if agent:
        params["agent_id"] = principal.actor_id
    if review_id:
        params["review_id"] = review_id
    else:
        params |= {"after_broadcast": after_broadcast, "actor_id": principal.actor_id}
    found: list[Nudge] = []
    broadcast_rows: list[Nudge] = []
    for row in await conn.execute(_FRONT[agent, bool(review_id)], params):
        # A nudge always names its review; a broadcast never does.
        (found if row[4] else broadcast_rows).append(Nudge(*row))
    # UNION ALL keeps no order of its own.
    return sorted(found, key=_by_pos), sorted(broadcast_rows, key=_by_pos)


def _by_pos(nudge: Nudge) -> int:
    return nudge.pos


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
    RETURNING unacked.review_id
    """
)


async def advance_cursors(conn: AsyncConnection, principal: Principal, acks: dict[str, int]) -> set[str]:
    """Move each review's ack cursor forward to its seq (every nudge of the review up to it leaves the
    un-acked frontier) if, and only if, every review is visible to ``principal`` and every seq is
    within its head: all or nothing, in one statement. What is acked stays acked, so a cursor never
    moves back. Returns the reviews whose cursor this moved (none when refused, or when all were acked
    already)."""
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
        return set(result.scalars())
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
        delete(unacked)
        .where(
            unacked.c.review_id.in_(review_ids),
            unacked.c.seq <= case(acks, value=unacked.c.review_id),
            all_valid == len(acks),
        )
        .returning(unacked.c.review_id)
    )
    return set(result.scalars())


async def cursors_of(
    conn: AsyncConnection, principal: Principal, review_ids: list[str]
) -> dict[str, tuple[int, int]]:
    """``review_id -> (last_acked_seq, last_seq)`` for those of ``review_ids`` the principal may see. Acks
    move a review's cursor through a seq, so its un-acked nudges are always the seqs after its cursor."""
    if not review_ids:
        return {}
    first_unacked = (
        select(func.min(unacked.c.seq))
        .where(unacked.c.review_id == review_heads.c.review_id)
        .scalar_subquery()
    )
    rows = await conn.execute(
        select(review_heads.c.review_id, review_heads.c.last_seq, first_unacked.label("first_unacked")).where(
            review_heads.c.review_id.in_(review_ids), visible_to(principal)
        )
    )
    return {
        r.review_id: (r.last_seq if r.first_unacked is None else int(r.first_unacked) - 1, r.last_seq)
        for r in rows
    }


def _broadcasts_visible_to(principal: Principal) -> ColumnElement[bool]:
    """The broadcasts of the principal's project and of its whole org; an agent sees those naming no
    agent or itself (other actors see the project's, as with nudges)."""
    condition = and_(
        broadcasts.c.org_id == principal.org_id, broadcasts.c.project_id.in_([principal.project_id, ""])
    )
    if principal.actor_kind is ActorKind.AGENT:
        condition = and_(condition, broadcasts.c.agent_id.in_([principal.actor_id, ""]))
    return condition


async def lock_broadcasts(conn: AsyncConnection, org_id: str) -> None:
    """On PostgreSQL, serialize one org's broadcast appends until commit (``pos`` commits in order)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": f"broadcast:{org_id}"}
        )


async def append_broadcast(conn: AsyncConnection, broadcast: Broadcast, *, created_at: datetime) -> None:
    """Insert a broadcast and (PostgreSQL) announce it on commit: to its project, or to every one."""
    await conn.execute(
        insert(broadcasts).values(
            id=broadcast.id,
            org_id=broadcast.org_id,
            project_id=broadcast.project_id,
            agent_id=broadcast.agent_id,
            reason=broadcast.reason.value,
            category_id=broadcast.category_id,
            payload=orjson.dumps(broadcast.payload).decode(),
            created_at=created_at,
        )
    )
    if conn.dialect.name == "postgresql":
        await conn.execute(
            text("SELECT pg_notify(:channel, :project_id)"),
            {"channel": NOTIFY_CHANNEL, "project_id": broadcast.project_id},
        )


async def head_of(conn: AsyncConnection, principal: Principal) -> tuple[int, int]:
    """The ``pos`` of the newest nudge and of the newest broadcast the principal's project holds (0 when
    none): appends of a project (and broadcasts of an org) commit in ``pos`` order, so nothing of it
    commits below them later."""
    newest_nudge = (
        select(func.max(nudges.c.pos))
        .join(review_heads, review_heads.c.review_id == nudges.c.review_id)
        .where(review_heads.c.org_id == principal.org_id, review_heads.c.project_id == principal.project_id)
    )
    newest_broadcast = select(func.max(broadcasts.c.pos)).where(
        broadcasts.c.org_id == principal.org_id, broadcasts.c.project_id.in_([principal.project_id, ""])
    )
    return (
        int(await conn.scalar(newest_nudge) or 0),
        int(await conn.scalar(newest_broadcast) or 0),
    )


async def ack_broadcasts(conn: AsyncConnection, principal: Principal, ids: list[str]) -> set[str]:
    """Mark the broadcasts of ``ids`` the principal may see as done for it (again: no change); returns
    the ids it may see, so the caller can name the others."""
    rows = (
        await conn.execute(
            select(broadcasts.c.pos, broadcasts.c.id).where(
                broadcasts.c.id.in_(ids), _broadcasts_visible_to(principal)
            )
        )
    ).all()
    if rows:
        await insert_new(
            conn, broadcast_acks, [{"broadcast_pos": row.pos, "actor_id": principal.actor_id} for row in rows]
        )
    return {row.id for row in rows}


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


# --- webhook queries ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    id: str
    org_id: str
    project_id: str
    url: str
    reasons: list[str]
    created_at: datetime


def _endpoint(row: Row[Any]) -> Endpoint:
    return Endpoint(row.id, row.org_id, row.project_id, row.url, list(row.reasons), row.created_at)


async def add_endpoint(conn: AsyncConnection, endpoint: Endpoint) -> None:
    await conn.execute(
        insert(webhook_endpoints).values(
            id=endpoint.id,
            org_id=endpoint.org_id,
            project_id=endpoint.project_id,
            url=endpoint.url,
            reasons=endpoint.reasons,
            created_at=endpoint.created_at,
        )
    )


# Built once: every stored nudge asks for its project's endpoints.
_ENDPOINTS = select(webhook_endpoints).where(webhook_endpoints.c.org_id == bindparam("org_id"))
_ORDER = (webhook_endpoints.c.created_at, webhook_endpoints.c.id)
_ORG_ENDPOINTS = _ENDPOINTS.order_by(*_ORDER)
_PROJECT_ENDPOINTS = _ENDPOINTS.where(webhook_endpoints.c.project_id == bindparam("project_id")).order_by(
    *_ORDER
)


async def endpoints_of(conn: AsyncConnection, org_id: str, project_id: str) -> list[Endpoint]:
    """The endpoints of a project; with ``project_id`` "" (an org-wide broadcast), of every project of the
    org."""
    if project_id:
        rows = await conn.execute(_PROJECT_ENDPOINTS, {"org_id": org_id, "project_id": project_id})
    else:
        rows = await conn.execute(_ORG_ENDPOINTS, {"org_id": org_id})
    return [_endpoint(row) for row in rows]


_ENDPOINTS_OF_PROJECTS = (
    select(webhook_endpoints)
    .where(webhook_endpoints.c.project_id.in_(bindparam("project_ids", expanding=True)))
    .order_by(*_ORDER)
)


async def endpoints_of_projects(
    conn: AsyncConnection, owners: set[tuple[str, str]]
) -> dict[tuple[str, str], list[Endpoint]]:
    """``endpoints_of`` for each ``(org_id, project_id)`` of ``owners``, in one statement."""
    found: dict[tuple[str, str], list[Endpoint]] = {owner: [] for owner in owners}
    rows = await conn.execute(_ENDPOINTS_OF_PROJECTS, {"project_ids": sorted({p for _, p in owners})})
    for row in rows:
        if (owner := (row.org_id, row.project_id)) in found:
            found[owner].append(_endpoint(row))
    return found


async def endpoint(conn: AsyncConnection, endpoint_id: str) -> Endpoint | None:
    row = (await conn.execute(select(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id))).first()
    return None if row is None else _endpoint(row)


async def delete_endpoint(conn: AsyncConnection, endpoint_id: str) -> None:
    for table, column in (
        (webhook_deliveries, webhook_deliveries.c.endpoint_id),
        (webhook_secrets, webhook_secrets.c.endpoint_id),
        (webhook_endpoints, webhook_endpoints.c.id),
    ):
        await conn.execute(delete(table).where(column == endpoint_id))


async def add_secret(
    conn: AsyncConnection, endpoint_id: str, version: int, salt: str, key_id: str, now: datetime
) -> None:
    await conn.execute(
        insert(webhook_secrets).values(
            endpoint_id=endpoint_id, version=version, salt=salt, key_id=key_id, created_at=now
        )
    )


async def expire_current_secret(conn: AsyncConnection, endpoint_id: str, expires_at: datetime) -> int:
    """End the current secret's term at ``expires_at``; cut short every older one still in its overlap.
    Returns the current version."""
    current = (
        await conn.execute(
            select(func.max(webhook_secrets.c.version)).where(webhook_secrets.c.endpoint_id == endpoint_id)
        )
    ).scalar_one()
    await conn.execute(
        update(webhook_secrets)
        .where(
            webhook_secrets.c.endpoint_id == endpoint_id,
            webhook_secrets.c.version < current,
            webhook_secrets.c.expires_at > expires_at,
        )
        .values(expires_at=expires_at)
    )
    await conn.execute(
        update(webhook_secrets)
        .where(webhook_secrets.c.endpoint_id == endpoint_id, webhook_secrets.c.version == current)
        .values(expires_at=expires_at)
    )
    return int(current)


async def live_secrets(conn: AsyncConnection, endpoint_id: str, now: datetime) -> list[tuple[int, str, str]]:
    """(version, salt, key_id) of every secret that signs at ``now``, newest first."""
    rows = await conn.execute(
        select(webhook_secrets.c.version, webhook_secrets.c.salt, webhook_secrets.c.key_id)
        .where(
            webhook_secrets.c.endpoint_id == endpoint_id,
            (webhook_secrets.c.expires_at.is_(None)) | (webhook_secrets.c.expires_at > now),
        )
        .order_by(webhook_secrets.c.version.desc())
    )
    return [(int(row.version), str(row.salt), str(row.key_id)) for row in rows]


async def secret_versions(conn: AsyncConnection, endpoint_ids: list[str]) -> dict[str, int]:
    rows = await conn.execute(
        select(webhook_secrets.c.endpoint_id, func.max(webhook_secrets.c.version))
        .where(webhook_secrets.c.endpoint_id.in_(endpoint_ids))
        .group_by(webhook_secrets.c.endpoint_id)
    )
    return {row[0]: int(row[1]) for row in rows}


async def enqueue_deliveries(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    if rows:
        await conn.execute(insert(webhook_deliveries), rows)


async def endpoints_due(conn: AsyncConnection, now: datetime, limit: int) -> list[str]:
    """Up to ``limit`` endpoints whose head delivery (the oldest pending: order) is due now and with no
    live claim, the longest waiting first, so a full sender still gets to every endpoint in turn. Only
    the head counts: an endpoint whose head waits for its retry is not due, whatever queued behind it."""
    heads = (
        select(webhook_deliveries.c.endpoint_id, func.min(webhook_deliveries.c.pos).label("pos"))
        .where(webhook_deliveries.c.status == "pending")
        .group_by(webhook_deliveries.c.endpoint_id)
        .subquery()
    )
    query = (
        select(webhook_deliveries.c.endpoint_id)
        .join(heads, heads.c.pos == webhook_deliveries.c.pos)
        .join(webhook_endpoints, webhook_endpoints.c.id == webhook_deliveries.c.endpoint_id)
        .where(
            webhook_deliveries.c.next_attempt_at <= now,
            (webhook_endpoints.c.lease_until.is_(None)) | (webhook_endpoints.c.lease_until < now),
        )
        .order_by(webhook_deliveries.c.next_attempt_at, webhook_deliveries.c.endpoint_id)
        .limit(limit)
    )
    return [str(row[0]) for row in await conn.execute(query)]


async def claim_endpoint(
    conn: AsyncConnection, endpoint_id: str, now: datetime, until: datetime | None
) -> bool:
    """Take (``until`` a time) or give back (None) an endpoint's delivery claim; CAS on the lease."""
    query = update(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id)
    if until is not None:
        query = query.where(
            (webhook_endpoints.c.lease_until.is_(None)) | (webhook_endpoints.c.lease_until < now)
        )
    result = await conn.execute(query.values(lease_until=until))
    return bool(result.rowcount == 1)


async def head_delivery(conn: AsyncConnection, endpoint_id: str) -> Row[Any] | None:
    """The endpoint's oldest pending delivery: deliveries to one endpoint go in order."""
    query = (
        select(webhook_deliveries)
        .where(webhook_deliveries.c.endpoint_id == endpoint_id, webhook_deliveries.c.status == "pending")
        .order_by(webhook_deliveries.c.pos)
        .limit(1)
    )
    return (await conn.execute(query)).first()


async def record_attempt(conn: AsyncConnection, pos: int, **values: Any) -> None:
    await conn.execute(update(webhook_deliveries).where(webhook_deliveries.c.pos == pos).values(**values))


async def prune_deliveries(conn: AsyncConnection, finished_before: datetime) -> int:
    """Forget delivered and failed deliveries finished before ``finished_before`` (pending ones stay)."""
    result = await conn.execute(
        delete(webhook_deliveries).where(
            webhook_deliveries.c.status != "pending", webhook_deliveries.c.finished_at < finished_before
        )
    )
    return int(result.rowcount or 0)


async def deliveries_of(conn: AsyncConnection, endpoint_id: str, status: str, limit: int) -> list[Row[Any]]:
    query = select(webhook_deliveries).where(webhook_deliveries.c.endpoint_id == endpoint_id)
    if status:
        query = query.where(webhook_deliveries.c.status == status)
    return list(await conn.execute(query.order_by(webhook_deliveries.c.pos.desc()).limit(limit)))
