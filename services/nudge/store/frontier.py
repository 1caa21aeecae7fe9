"""Reading and acking the un-acked frontier: the caller's un-acked nudges and broadcasts, heads and
cursors, and the guarded cursor advance an ack is."""

from __future__ import annotations

from typing import Any

from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import (
    BigInteger,
    CompoundSelect,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal,
    select,
    text,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge.store.nudge_log import Nudge, visible_to
from nudge.store.tables import broadcast_acks, broadcasts, nudges, review_heads, unacked


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
