"""The shared-pool auto-send governor: a counter per sending pool per UTC day, a receipt per review."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from reviewloop.storage.schema import insert_new
from sqlalchemy import case, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget.domain.pool import ReceiptStatus
from dispatch_budget.store.tables import send_pool_days, send_pool_receipts


@dataclass(frozen=True)
class PoolReceipt:
    receipt_id: str
    pool: str
    day: date
    status: ReceiptStatus


@dataclass(frozen=True)
class PoolDay:
    pool: str
    day: date
    used: int
    refunded: int
    kept: int


async def add_pool_receipt(
    conn: AsyncConnection,
    *,
    project_id: str,
    org_id: str,
    review_id: str,
    receipt_id: str,
    pool: str,
    day: date,
    at: datetime,
) -> bool:
    """Record ``review_id``'s receipt; False when it had one (a retry spends nothing more)."""
    written = await insert_new(
        conn,
        send_pool_receipts,
        {
            "project_id": project_id,
            "review_id": review_id,
            "receipt_id": receipt_id,
            "org_id": org_id,
            "pool": pool,
            "day": day,
            "status": ReceiptStatus.CONSUMED.value,
            "consumed_at": at,
        },
    )
    return bool(written.rowcount == 1)


async def pool_receipt_of(conn: AsyncConnection, project_id: str, review_id: str) -> PoolReceipt | None:
    r = send_pool_receipts.c
    row = (
        await conn.execute(
            select(r.receipt_id, r.pool, r.day, r.status).where(
                r.project_id == project_id, r.review_id == review_id
            )
        )
    ).one_or_none()
    if row is None:
        return None
    return PoolReceipt(row.receipt_id, row.pool, row.day, ReceiptStatus(row.status))


async def take_pool_unit(conn: AsyncConnection, pool: str, day: date, budget: int) -> bool:
    """Take one unit of the pool's counter for ``day``; False (nothing taken) at the budget. The
    conditional increment is the compare-and-set: its row count decides, so concurrent releases on
    any replica never take the counter past the budget."""
    await insert_new(conn, send_pool_days, {"pool": pool, "day": day, "used": 0})
    d = send_pool_days.c
    bumped = await conn.execute(
        update(send_pool_days).where(d.pool == pool, d.day == day, d.used < budget).values(used=d.used + 1)
    )
    return bool(bumped.rowcount == 1)


async def settle_pool_receipt(
    conn: AsyncConnection,
    project_id: str,
    review_id: str,
    expected: ReceiptStatus,
    status: ReceiptStatus,
    at: datetime,
) -> bool:
    """Move the receipt from ``expected`` to ``status`` (compare-and-set); False when it had moved."""
    r = send_pool_receipts.c
    moved = await conn.execute(
        update(send_pool_receipts)
        .where(r.project_id == project_id, r.review_id == review_id, r.status == expected.value)
        .values(status=status.value, settled_at=at)
    )
    return bool(moved.rowcount == 1)


async def respend_pool_receipt(
    conn: AsyncConnection, project_id: str, review_id: str, *, pool: str, day: date, at: datetime
) -> bool:
    """A refunded receipt spent again by a later release of the same review (a review agent's approval
    after a held one): refunded -> consumed (compare-and-set), on today's counter of its pool."""
    r = send_pool_receipts.c
    moved = await conn.execute(
        update(send_pool_receipts)
        .where(r.project_id == project_id, r.review_id == review_id, r.status == ReceiptStatus.REFUNDED.value)
        .values(status=ReceiptStatus.CONSUMED.value, pool=pool, day=day, consumed_at=at, settled_at=None)
    )
    return bool(moved.rowcount == 1)


async def give_back_pool_unit(conn: AsyncConnection, pool: str, day: date) -> None:
    d = send_pool_days.c
    await conn.execute(
        update(send_pool_days).where(d.pool == pool, d.day == day, d.used > 0).values(used=d.used - 1)
    )


async def pool_used(conn: AsyncConnection, pool: str, day: date) -> int:
    d = send_pool_days.c
    value = (await conn.execute(select(d.used).where(d.pool == pool, d.day == day))).scalar()
    return int(value or 0)


async def pool_days(conn: AsyncConnection, day: date) -> list[PoolDay]:
    """Every pool's counter on ``day``, with its refunded and kept receipts, by pool."""
    d, r = send_pool_days.c, send_pool_receipts.c
    counts = (
        select(
            r.pool,
            func.sum(case((r.status == ReceiptStatus.REFUNDED.value, 1), else_=0)).label("refunded"),
            func.sum(case((r.status == ReceiptStatus.KEPT.value, 1), else_=0)).label("kept"),
        )
        .where(r.day == day)
        .group_by(r.pool)
        .subquery()
    )
    rows = (
        await conn.execute(
            select(d.pool, d.day, d.used, counts.c.refunded, counts.c.kept)
            .select_from(send_pool_days.outerjoin(counts, counts.c.pool == d.pool))
            .where(d.day == day)
            .order_by(d.pool)
        )
    ).all()
    return [
        PoolDay(row.pool, row.day, int(row.used), int(row.refunded or 0), int(row.kept or 0)) for row in rows
    ]
