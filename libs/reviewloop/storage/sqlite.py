"""SQLite through aiosqlite, one thread crossing per statement.

SQLAlchemy's aiosqlite adapter crosses to aiosqlite's worker thread four times per statement (cursor,
execute, fetch, close); on two shared cores each crossing costs a wake-up on both sides, and a review
submit spent a quarter of its time there. This adapter runs the whole statement in one crossing and is
otherwise SQLAlchemy's aiosqlite dialect unchanged (``make_engine`` selects it for ``sqlite+aiosqlite``
URLs). It reaches aiosqlite's ``_execute`` and ``_conn``, which is why aiosqlite is pinned below 0.23.

Every SQLite connection, on this adapter or SQLAlchemy's own, is a ``RollbackOnClose``.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Sequence
from typing import Any

from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
    SQLiteDialect_aiosqlite,
)

DRIVER = "sqlite+reviewloop_aiosqlite"


class RollbackOnClose(sqlite3.Connection):
    """A sqlite3 connection that rolls back its open transaction when it is closed (``factory=``).

    A unit cancelled inside its transaction (a caller gone, issue 34) has its connection invalidated
    and closed. sqlite3 (3.11) closes with ``sqlite3_close_v2`` and no rollback: while any statement
    of the connection is not finalized the close is deferred, and the open transaction keeps the
    file's write lock. SQLAlchemy's aiosqlite adapter leaves such a statement behind whenever a
    statement fails (an IntegrityError: it closes the cursor only on cancellation), referenced from
    the error's traceback cycle until the cycle collector runs, so a retry met "database is locked".
    Runs on aiosqlite's thread, on a graceful close and a forced one alike.
    """

    def close(self) -> None:
        """Roll back an open transaction, then close."""
        try:
            if self.in_transaction:
                self.rollback()
        finally:
            super().close()


class _Cursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()

    def execute(self, operation: Any, parameters: Any = None) -> None:
        raw = self._connection

        def statement() -> tuple[Any, list[Any] | None, int | None, int]:
            cursor = raw._conn.cursor()
            try:
                cursor.execute(operation, () if parameters is None else parameters)
                description = cursor.description
                rows = cursor.fetchall() if description else None
                return description, rows, cursor.lastrowid, cursor.rowcount
            finally:
                cursor.close()

        try:
            description, rows, lastrowid, rowcount = self.await_(raw._execute(statement))
        except Exception as error:
            self._adapt_connection._handle_exception(error)
        if description:
            self.description = description
            self.lastrowid = self.rowcount = -1
            self._rows = deque(rows or ())
        else:
            self.description = None
            self.lastrowid = lastrowid
            self.rowcount = rowcount

    def executemany(self, operation: Any, seq_of_parameters: Sequence[Any]) -> None:
        raw = self._connection

        def statements() -> tuple[int | None, int]:
            cursor = raw._conn.cursor()
            try:
                cursor.executemany(operation, seq_of_parameters)
                return cursor.lastrowid, cursor.rowcount
            finally:
                cursor.close()

        try:
            self.lastrowid, self.rowcount = self.await_(raw._execute(statements))
        except Exception as error:
            self._adapt_connection._handle_exception(error)
        self.description = None


class _Connection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ()

    def cursor(self, server_side: bool = False) -> AsyncAdapt_aiosqlite_cursor:
        return super().cursor(server_side) if server_side else _Cursor(self)


class _DBAPI(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *arg: Any, **kw: Any) -> Any:
        adapted = super().connect(*arg, **kw)
        if type(adapted) is not AsyncAdapt_aiosqlite_connection:
            return adapted  # the sync fallback mode keeps SQLAlchemy's own adapter
        return _Connection(self, adapted._connection)


class SQLiteDialectOneCrossing(SQLiteDialect_aiosqlite):
    """SQLAlchemy's aiosqlite dialect with one thread crossing per statement, registered as ``DRIVER``."""

    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> AsyncAdapt_aiosqlite_dbapi:
        """The adapted DB-API module whose connections run each statement in one crossing."""
        return _DBAPI(__import__("aiosqlite"), __import__("sqlite3"))


registry.register(DRIVER.replace("+", "."), __name__, SQLiteDialectOneCrossing.__name__)
