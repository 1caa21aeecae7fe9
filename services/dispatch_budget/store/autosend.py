"""The daily auto-send caps: one counter per category per UTC day, one spend row per review."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from reviewloop.storage.schema import insert_new
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget.store.tables import auto_send_days, auto_send_spends


@dataclass(frozen=True)
class AutoSendSpend:
    """The unit a review spent: its category's counter on that UTC day."""

    category_id: str
    day: date


async def remember_auto_send_spend(
    conn: AsyncConnection, project_id: str, *, review_id: str, category_id: str, day: date, at: datetime
) -> bool:
    """Record that ``review_id`` spends a unit; False when it already had (a retry spends nothing more)."""
    spent = await insert_new(
        conn,
        auto_send_spends,
        {
            "project_id": project_id,
            "review_id": review_id,
            "category_id": category_id,
            "day": day,
            "spent_at": at,
        },
    )
    return bool(spent.rowcount == 1)


async def auto_send_spend_of(conn: AsyncConnection, project_id: str, review_id: str) -> AutoSendSpend:
    """The unit ``review_id`` already spent."""
    s = auto_send_spends.c
    row = (
        await conn.execute(
            select(s.category_id, s.day).where(s.project_id == project_id, s.review_id == review_id)
        )
    ).one()
    return AutoSendSpend(row.category_id, row.day)


async def spend_auto_send(
    conn: AsyncConnection, project_id: str, category_id: str, day: date, cap_per_day: int
) -> bool:
    """Take one unit of the category's counter for ``day``; False (nothing taken) at the cap."""
    await insert_new(
        conn, auto_send_days, {"project_id": project_id, "category_id": category_id, "day": day, "used": 0}
    )
    days = auto_send_days.c
    # The conditional increment is the atomic check: its row count decides.
    bumped = await conn.execute(
        update(auto_send_days)
        .where(
            days.project_id == project_id,
            days.category_id == category_id,
            days.day == day,
            days.used < cap_per_day,
        )
        .values(used=days.used + 1)
    )
    return bool(bumped.rowcount == 1)


async def auto_send_used(conn: AsyncConnection, project_id: str, category_id: str, day: date) -> int:
    """Units of the category's cap used on ``day``."""
    days = auto_send_days.c
    value = (
        await conn.execute(
            select(days.used).where(
                days.project_id == project_id, days.category_id == category_id, days.day == day
            )
        )
    ).scalar()
    return int(value or 0)
