"""Categories (with their maturity counters, compared and set) and their graduation proposals."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reviewloop.storage.schema import utcnow
from sqlalchemy import (
    func,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rules.domain.graduation import Rung as GradRung
from rules.store.tables import categories, graduation_proposals


@dataclass(frozen=True)
class CategoryRow:
    id: str
    org_id: str
    project_id: str
    scope: str
    name: str
    description: str
    state: GradRung
    author_kind: str
    never_graduate: bool
    clean_approval_count: int
    drift_count: int
    version: int
    created_at: datetime
    state_changed_at: datetime
    updated_at: datetime
    merged_into: str = ""
    created_by_agent_id: str = ""  # empty: the console predefined it


def _category(row: Any) -> CategoryRow:
    m = row._mapping
    values = {name: m[name] for name in CategoryRow.__dataclass_fields__}
    return CategoryRow(**{**values, "state": GradRung(m["state"])})


def _visible(org_id: str, project_id: str) -> Any:
    """A project sees its org's shared categories and its own."""
    return (categories.c.org_id == org_id) & (
        (categories.c.scope == "org_shared") | (categories.c.project_id == project_id)
    )


async def add_category(conn: AsyncConnection, category: CategoryRow, normalized_name: str) -> None:
    values = dict(category.__dict__)
    values["state"] = category.state.value
    await conn.execute(insert(categories).values(**values, normalized_name=normalized_name))


async def get_category(
    conn: AsyncConnection, org_id: str, project_id: str, category_id: str, *, lock: bool = False
) -> CategoryRow | None:
    """The category if ``project_id`` can see it; ``lock`` holds its row until commit (PostgreSQL)."""
    query = select(categories).where(categories.c.id == category_id, _visible(org_id, project_id))
    if lock:
        query = query.with_for_update()
    row = (await conn.execute(query)).first()
    return _category(row) if row else None


async def category_owner(conn: AsyncConnection, category_id: str) -> tuple[str, str] | None:
    row = (
        await conn.execute(
            select(categories.c.org_id, categories.c.project_id).where(categories.c.id == category_id)
        )
    ).first()
    return (row.org_id, row.project_id) if row else None


async def category_named(
    conn: AsyncConnection, org_id: str, project_id: str, normalized_name: str
) -> CategoryRow | None:
    row = (
        await conn.execute(
            select(categories).where(
                _visible(org_id, project_id),
                categories.c.normalized_name == normalized_name,
                categories.c.merged_into == "",  # a merged category's name is free again
            )
        )
    ).first()
    return _category(row) if row else None


async def list_categories(
    conn: AsyncConnection, org_id: str, project_id: str, after_id: str, limit: int
) -> list[CategoryRow]:
    query = select(categories).where(_visible(org_id, project_id), categories.c.merged_into == "")
    if after_id:
        query = query.where(categories.c.id > after_id)
    rows = await conn.execute(query.order_by(categories.c.id).limit(limit))
    return [_category(r) for r in rows]


async def count_categories(conn: AsyncConnection, org_id: str, project_id: str) -> int:
    """How many categories ``list_categories`` pages through (every page)."""
    query = select(func.count()).select_from(categories)
    return int(
        await conn.scalar(query.where(_visible(org_id, project_id), categories.c.merged_into == "")) or 0
    )


# What moves a category without changing its record: ``updated_at`` stays.
_COUNTERS = frozenset({"clean_approval_count", "drift_count"})


async def compare_and_set_category(conn: AsyncConnection, current: CategoryRow, **changes: Any) -> bool:
    """Write ``changes`` only if the category is still at ``current.version``; the row count decides.
    Any change but the maturity counters' moves ``updated_at``."""
    if "state" in changes:
        changes["state"] = changes["state"].value
    if set(changes) - _COUNTERS:
        changes.setdefault("updated_at", utcnow())
    result = await conn.execute(
        update(categories)
        .where(categories.c.id == current.id, categories.c.version == current.version)
        .values(version=current.version + 1, **changes)
    )
    return bool(result.rowcount == 1)


async def add_proposal(conn: AsyncConnection, **values: Any) -> None:
    await conn.execute(insert(graduation_proposals).values(**values))


async def pending_proposals(conn: AsyncConnection, project_id: str) -> list[dict[str, Any]]:
    """This project's undecided proposals whose category still sits on the rung they proposed to leave
    (a human has not acted on it since), newest first."""
    p = graduation_proposals.c
    query = (
        select(graduation_proposals)
        .join(categories, categories.c.id == p.category_id)
        .where(p.project_id == project_id, p.status == "proposed", categories.c.state == p.from_state)
        .order_by(p.created_at.desc(), p.id.desc())
    )
    return [dict(row._mapping) for row in (await conn.execute(query)).all()]


async def category_proposals(
    conn: AsyncConnection, project_id: str, category_id: str
) -> list[dict[str, Any]]:
    """Every proposal of this project for the category, decided ones included, newest first."""
    p = graduation_proposals.c
    query = (
        select(graduation_proposals)
        .where(p.project_id == project_id, p.category_id == category_id)
        .order_by(p.created_at.desc(), p.id.desc())
    )
    return [dict(row._mapping) for row in (await conn.execute(query)).all()]


async def get_proposal(conn: AsyncConnection, proposal_id: str) -> dict[str, Any] | None:
    row = (
        await conn.execute(select(graduation_proposals).where(graduation_proposals.c.id == proposal_id))
    ).first()
    return dict(row._mapping) if row else None


async def decide_proposals(
    conn: AsyncConnection,
    ids: list[str],
    status: str,
    decided_by: str,
    decided_at: datetime,
    reason: str = "",
) -> int:
    """Close the still-undecided proposals among ``ids`` (compare-and-set on ``proposed``); how many."""
    p = graduation_proposals.c
    result = await conn.execute(
        update(graduation_proposals)
        .where(p.id.in_(ids), p.status == "proposed")
        .values(status=status, decided_by=decided_by, decided_at=decided_at, reason=reason or None)
    )
    return int(result.rowcount)
