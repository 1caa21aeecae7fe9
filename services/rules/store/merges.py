"""Category merges: their audit rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    insert,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rules.store.tables import category_merges


@dataclass(frozen=True)
class CategoryMergeRow:
    id: str
    org_id: str
    project_id: str
    category_id: str  # merged away
    into_category_id: str  # the one that stays
    rationale: str
    actor_kind: str
    actor_id: str
    rules_moved: int
    rules_retired: int
    created_at: datetime


async def add_category_merge(conn: AsyncConnection, merge: CategoryMergeRow) -> None:
    await conn.execute(insert(category_merges).values(**merge.__dict__))


async def category_merges_of(conn: AsyncConnection, org_id: str, category_id: str) -> list[CategoryMergeRow]:
    """The merges ``category_id`` took part in, either side, oldest first."""
    rows = await conn.execute(
        select(category_merges)
        .where(
            category_merges.c.org_id == org_id,
            or_(
                category_merges.c.category_id == category_id,
                category_merges.c.into_category_id == category_id,
            ),
        )
        .order_by(category_merges.c.created_at, category_merges.c.id)
    )
    return [CategoryMergeRow(**dict(row._mapping)) for row in rows]
