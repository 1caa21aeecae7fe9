"""Broadcasts (issue 15): project-wide nudges, their append lock, the head a live tail starts after, and
their per-actor acks."""

from __future__ import annotations

from datetime import datetime

import orjson
from reviewloop.storage.schema import insert_new
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import (
    ColumnElement,
    and_,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge.domain.payloads import Broadcast
from nudge.store.tables import NOTIFY_CHANNEL, broadcast_acks, broadcasts, nudges, review_heads


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
