"""The diff store: one row per (review_id, from_revision, to_revision), addressed by its inputs' hash.

Rows are written once and never updated: a recompute with the same inputs reads the row back, a
different input for the same key is refused by the app (the primary key makes the race safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reviewloop.storage.schema import Json, UtcDateTime, insert_new, new_metadata
from sqlalchemy import BigInteger, Column, String, Table, Text, select
from sqlalchemy.ext.asyncio import AsyncConnection

metadata = new_metadata()

diffs = Table(
    "diffs",
    metadata,
    # Each project's diffs are its own: another tenant's key reads as absent.
    Column("project_id", String(40), primary_key=True),
    Column("review_id", String(64), primary_key=True),
    Column("from_revision", BigInteger, primary_key=True, autoincrement=False),
    Column("to_revision", BigInteger, primary_key=True, autoincrement=False),
    # Lowercase hex SHA-256 of the algorithm version and both inputs: the row's content address.
    Column("input_sha256", String(64), nullable=False),
    Column("fields_changed", Json, nullable=False),
    Column("diff_unified", Text, nullable=False),
    Column("diff_json", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)


@dataclass(frozen=True)
class DiffKey:
    project_id: str
    review_id: str
    from_revision: int
    to_revision: int


@dataclass(frozen=True)
class StoredDiff:
    key: DiffKey
    input_sha256: str
    fields_changed: tuple[str, ...]
    diff_unified: str
    diff_json: str
    created_at: datetime


async def get_diff(conn: AsyncConnection, key: DiffKey) -> StoredDiff | None:
    row = (
        await conn.execute(
            select(diffs).where(
                diffs.c.project_id == key.project_id,
                diffs.c.review_id == key.review_id,
                diffs.c.from_revision == key.from_revision,
                diffs.c.to_revision == key.to_revision,
            )
        )
    ).first()
    if row is None:
        return None
    return StoredDiff(
        key=key,
        input_sha256=row.input_sha256,
        fields_changed=tuple(row.fields_changed),
        diff_unified=row.diff_unified,
        diff_json=row.diff_json,
        created_at=row.created_at,
    )


async def add_diff(conn: AsyncConnection, diff: StoredDiff) -> bool:
    """Insert ``diff`` unless its key is taken; False when another row already holds the key."""
    result = await insert_new(
        conn,
        diffs,
        {
            "project_id": diff.key.project_id,
            "review_id": diff.key.review_id,
            "from_revision": diff.key.from_revision,
            "to_revision": diff.key.to_revision,
            "input_sha256": diff.input_sha256,
            "fields_changed": list(diff.fields_changed),
            "diff_unified": diff.diff_unified,
            "diff_json": diff.diff_json,
            "created_at": diff.created_at,
        },
    )
    return bool(result.rowcount == 1)
