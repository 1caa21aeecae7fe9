"""The risk dial: a project's account dial and its per-category overrides."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rules.store.tables import _put, risk_dials, risk_overrides


async def account_dial(conn: AsyncConnection, project_id: str) -> dict[str, Any]:
    row = (
        await conn.execute(select(risk_dials.c.account).where(risk_dials.c.project_id == project_id))
    ).first()
    return dict(row.account) if row else {}


async def save_account_dial(
    conn: AsyncConnection, org_id: str, project_id: str, account: dict[str, Any]
) -> None:
    await _put(conn, risk_dials, {"project_id": project_id, "org_id": org_id}, {"account": account})


async def overrides(
    conn: AsyncConnection, project_id: str, category_id: str = ""
) -> dict[str, dict[str, Any]]:
    """category_id -> the override fields the console wrote (a None value: explicitly inherited)."""
    query = select(risk_overrides).where(risk_overrides.c.project_id == project_id)
    if category_id:
        query = query.where(risk_overrides.c.category_id == category_id)
    rows = await conn.execute(query.order_by(risk_overrides.c.category_id))
    return {r.category_id: dict(r.overrides) for r in rows}


async def save_overrides(
    conn: AsyncConnection, project_id: str, category_id: str, values: dict[str, Any]
) -> None:
    await _put(
        conn, risk_overrides, {"project_id": project_id, "category_id": category_id}, {"overrides": values}
    )
