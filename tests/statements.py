"""Counting the statements a piece of work runs (issue 18: fewer statements per verb)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from reviewloop.storage import Database
from sqlalchemy import event


@contextmanager
def statements(db: Database) -> Iterator[list[str]]:
    """The statements ``db`` runs inside the block, as their SQL (SQLite's BEGIN left out)."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if not sql.startswith("BEGIN"):
            seen.append(sql)

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)
