"""The risk dial: a project's account dial and its per-category overrides."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rules.store.tables import ProjectDocument, _put, risk_dials, risk_overrides

# The account fields the console stored (absent ones are the built-in defaults).
account_dial = ProjectDocument(risk_dials, "account")


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
