"""Counting the statements a piece of work runs (issue 18: fewer statements per verb)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from reviewloop.storage import Database
from sqlalchemy import event
from sqlalchemy.engine.interfaces import CacheStats


class Statement(NamedTuple):
    sql: str
    # Whether SQLAlchemy reused its compiled form (a dialect's INSERT ... ON CONFLICT never is).
    cached: bool


@contextmanager
def statements(db: Database) -> Iterator[list[Statement]]:
    """The statements ``db`` runs inside the block (SQLite's BEGIN left out)."""
    seen: list[Statement] = []

    def record(_conn: Any, _cursor: Any, sql: str, _params: Any, context: Any, _many: bool) -> None:
        if not sql.startswith("BEGIN"):
            seen.append(Statement(sql, getattr(context, "cache_hit", None) is CacheStats.CACHE_HIT))

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)
