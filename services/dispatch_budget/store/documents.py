"""A project's configuration document (its review configuration, its gate overrides): one JSON row per
project, written whole."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reviewloop.storage.schema import insert_new
from sqlalchemy import Table, select, update
from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True)
class ProjectDocument:
    """One JSON document per project in ``table`` (its ``config`` column), written whole by an admin."""

    table: Table

    async def read(self, conn: AsyncConnection, project_id: str) -> dict[str, Any]:
        """The document an admin stored; empty when none was."""
        t = self.table.c
        row = (await conn.execute(select(t.config).where(t.project_id == project_id))).first()
        return dict(row.config) if row is not None else {}

    async def save(
        self, conn: AsyncConnection, project_id: str, document: dict[str, Any], at: datetime
    ) -> None:
        """Replace the project's document (an upsert: a concurrent first write does not fail)."""
        await insert_new(conn, self.table, {"project_id": project_id, "config": {}, "updated_at": at})
        await conn.execute(
            update(self.table)
            .where(self.table.c.project_id == project_id)
            .values(config=document, updated_at=at)
        )
