"""Delivery attempts: one per review, the whole delivery history of a message that is never resent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.domain.review import Review
from review_state.store.tables import delivery_attempts


async def start_attempt(
    conn: AsyncConnection,
    review: Review,
    message_id: str,
    rfc_message_id: str,
    send_path: str,
    now: datetime,
) -> None:
    await conn.execute(
        insert(delivery_attempts).values(
            review_id=review.id,
            project_id=review.project_id,
            message_id=message_id,
            rfc_message_id=rfc_message_id,
            send_path=send_path,
            status="in_flight",
            started_at=now,
        )
    )


@dataclass(frozen=True)
class Attempt:
    """A review's one delivery attempt, and the ids it was sent under."""

    review_id: str
    message_id: str
    rfc_message_id: str
    send_path: str
    started_at: datetime


def _attempt(row: Any) -> Attempt:
    return Attempt(row.review_id, row.message_id, row.rfc_message_id, row.send_path, row.started_at)


async def get_attempt(conn: AsyncConnection, review_id: str) -> Attempt | None:
    row = (
        await conn.execute(select(delivery_attempts).where(delivery_attempts.c.review_id == review_id))
    ).first()
    return _attempt(row) if row else None


async def finish_attempt(
    conn: AsyncConnection, review_id: str, status: str, now: datetime, error: str | None = None
) -> bool:
    """Closes an in-flight attempt; False when someone (the sweep, a twin) already closed it."""
    result = await conn.execute(
        update(delivery_attempts)
        .where(delivery_attempts.c.review_id == review_id, delivery_attempts.c.status == "in_flight")
        .values(status=status, finished_at=now, error=error)
    )
    return bool(result.rowcount == 1)


async def parked_attempts(conn: AsyncConnection, started_before: datetime, limit: int = 100) -> list[Attempt]:
    """In-flight attempts older than a live send could take: their outcome is unknown."""
    rows = await conn.execute(
        select(delivery_attempts)
        .where(delivery_attempts.c.status == "in_flight", delivery_attempts.c.started_at < started_before)
        .order_by(delivery_attempts.c.started_at)
        .limit(limit)
    )
    return [_attempt(row) for row in rows]
