"""Engines and units of work: one transaction per use case, on SQLite or PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, NoReturn

import orjson
from google.protobuf.message import Message
from sqlalchemy import CTE, Insert, Select, Table, bindparam, event, insert, literal_column, select, union_all
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.util import await_only

from reviewloop.files import private_dir, private_file
from reviewloop.storage import fastpaths, sqlite
from reviewloop.storage.driver import DriverEngine
from reviewloop.storage.schema import OUTBOX, outbox_row

SQLITE_BUSY_TIMEOUT_MS = 10_000
# PostgreSQL connections one process may hold (``REVIEWLOOP_DB_POOL_SIZE``).
DEFAULT_POOL_SIZE = 20


def is_sqlite(engine: AsyncEngine) -> bool:
    """Whether ``engine`` is SQLite, whose single writer and locking need the special handling here."""
    return engine.dialect.name == "sqlite"


# Set on the connections of a unit of work (``Database.writer``): on SQLite they BEGIN IMMEDIATE.
WRITE_OPTION = "reviewloop_write"
# Set on reads of exactly one statement (``Database.single_statement``): on SQLite they skip BEGIN.
SINGLE_STATEMENT_OPTION = "reviewloop_single_statement"


def _json_dumps(value: Any) -> str:
    # Keys that are not strings become strings, as json.dumps makes them.
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def make_engine(
    url: str, pool_size: int = DEFAULT_POOL_SIZE, fast_paths: frozenset[str] = fastpaths.ALL, **kwargs: Any
) -> AsyncEngine:
    """An async engine for ``url``, on SQLite or PostgreSQL.

    SQLite gets WAL, foreign keys and a busy timeout; a unit of work begins IMMEDIATE (two writers queue
    on the lock instead of failing on upgrade), while reads begin DEFERRED, so under WAL they never wait
    for a writer. On PostgreSQL the process holds at most ``pool_size`` connections.
    JSON columns are written and read with orjson: the standard library's json was ~3% of review_state's
    CPU, every review holding its recipients, headers and intent as JSON (issue 18).
    """
    kwargs = {"json_serializer": _json_dumps, "json_deserializer": orjson.loads, **kwargs}
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # No pre-ping: it cost a round trip on every checkout (4 per approve). A connection found dead
        # fails its statement once; SQLAlchemy then invalidates it and every older pooled connection
        # (a restarted server dropped them all), so the caller's retry gets a fresh one.
        # Every connection is kept (no overflow): an overflow connection is closed when it is returned, so
        # a steady load above the kept size opened and closed one per burst (a TLS handshake, a new
        # backend, every statement prepared again), 48 in one lifecycle bench run of review_state.
        # One-statement work runs on the driver (``driver.DriverEngine``).
        engine = create_async_engine(url, pool_size=pool_size, max_overflow=0, pool_pre_ping=False, **kwargs)
        return DriverEngine(engine.sync_engine) if fastpaths.DRIVER in fast_paths else engine
    if parsed.database and parsed.database != ":memory:":
        private_file(private_dir(Path(parsed.database).parent) / Path(parsed.database).name)
    if parsed.drivername == "sqlite+aiosqlite" and fastpaths.SQLITE_ONE_CROSSING in fast_paths:
        parsed = parsed.set(drivername=sqlite.DRIVER)  # the same driver, one thread crossing a statement
    connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "factory": sqlite.RollbackOnClose}
    engine = create_async_engine(parsed, connect_args=connect_args, **kwargs)

    @event.listens_for(engine.sync_engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves, below
        cursor = dbapi_connection.cursor()
        _enable_wal(cursor)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(connection: Any) -> None:
        options = connection.get_execution_options()
        if options.get(SINGLE_STATEMENT_OPTION, False):
            return  # one statement is its own snapshot; a BEGIN would only add a round trip
        writes = options.get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN DEFERRED")

    return engine


POOL_GAUGE = "db.client.connections.usage"


def pool_probe(engine: AsyncEngine) -> Callable[[], Awaitable[dict[str, list[tuple[float, dict[str, str]]]]]]:
    """The pool gauge, ``db.client.connections.usage``: connections ``used`` and ``idle``.

    Read on a scrape from the pool's own counts, not counted on every checkout and checkin (which cost
    review_state and nudge 2-3% of their CPU under load).
    """
    url = engine.url
    name = f"{url.drivername}://{url.host or ''}:{url.port or ''}/{url.database or ''}"

    async def probe() -> dict[str, list[tuple[float, dict[str, str]]]]:
        pool: Any = engine.sync_engine.pool
        if not hasattr(pool, "checkedout"):
            return {}  # a pool that keeps no connections (NullPool, StaticPool) has nothing to report
        return {
            POOL_GAUGE: [
                (float(pool.checkedout()), {"pool.name": name, "state": "used"}),
                (float(pool.checkedin()), {"pool.name": name, "state": "idle"}),
            ]
        }

    return probe


def _enable_wal(cursor: Any) -> None:
    """Put the file in WAL mode, waiting out other connections that are switching it too.

    The switch needs an exclusive lock, and SQLite refuses it at once ("database is locked") rather
    than calling the busy handler, so replicas opening a fresh file together failed at random.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode")
            if cursor.fetchone()[0] != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            await_only(asyncio.sleep(0.01))  # the connect hook runs inside SQLAlchemy's greenlet


class Database:
    """A service's store: the engine plus the hook that wakes its outbox relay after a commit."""

    def __init__(self, engine: AsyncEngine, fast_paths: frozenset[str] = fastpaths.ALL) -> None:
        self.engine = engine  # for reads: ``async with db.engine.connect()``
        self.fast_paths = fast_paths  # which of ``fastpaths.NAMES`` this store takes (as its engine was made)
        self.writer = engine.execution_options(**{WRITE_OPTION: True})  # for writes; see transaction()
        # For hot reads of exactly one statement: ``async with db.single_statement.connect()``. One
        # statement is its own snapshot: SQLite skips BEGIN (``_begin``), PostgreSQL runs it in
        # autocommit, two round trips fewer than BEGIN ... ROLLBACK.
        self.autocommit = fastpaths.AUTOCOMMIT in self.fast_paths
        single: dict[str, Any] = {}
        if self.autocommit:
            single[SINGLE_STATEMENT_OPTION] = True
            if not is_sqlite(engine):
                single["isolation_level"] = "AUTOCOMMIT"
        self.single_statement = engine.execution_options(**single)
        self.after_commit: list[Callable[[], None]] = []
        # SQLite has one writer at a time, and its busy handler waits in sleeps that grow to 100 ms
        # (8 concurrent submits saw a p99 over a second). Writers of this process queue here instead,
        # and each starts the moment the previous one commits; other processes still meet the busy
        # timeout.
        self._write_lock = asyncio.Lock() if is_sqlite(engine) else None
        self._writer: asyncio.Task[Any] | None = None  # the task holding the lock, to catch nesting

    @property
    def is_sqlite(self) -> bool:
        """Whether the store is SQLite."""
        return is_sqlite(self.engine)

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[AsyncConnection]:
        """A bare write transaction (BEGIN IMMEDIATE on SQLite), committed on success."""
        if self._write_lock is None:
            async with self.writer.begin() as conn:
                yield conn
            return
        if self._writer is not None and self._writer is asyncio.current_task():
            # On SQLite a second writer inside the first could never begin: say so instead of hanging.
            raise RuntimeError("a write transaction was opened inside another one on the same store")
        async with self._write_lock, self.writer.begin() as conn:
            self._writer = asyncio.current_task()
            try:
                yield conn
            finally:
                self._writer = None

    @asynccontextmanager
    async def one_statement(self) -> AsyncIterator[AsyncConnection]:
        """A connection for a write that is one statement, atomic by itself (a claim, an ack).

        On PostgreSQL it runs in autocommit, two round trips fewer than BEGIN ... COMMIT; SQLite keeps
        its queued BEGIN IMMEDIATE. It emits no events: work that does is a ``transaction``.
        """
        if self._write_lock is not None or not self.autocommit:
            async with self.writing() as conn:
                yield conn
            return
        async with self.single_statement.connect() as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[UnitOfWork]:
        """One unit of work: commit on success, roll back on any exception, then wake the relays.

        On PostgreSQL the transaction begins with the unit's first statement; a unit whose only
        statement is its queued rows (a submit's review, revision and key) writes them in autocommit,
        one round trip instead of BEGIN, the rows and COMMIT.
        """
        if self._write_lock is not None:
            async with self.writing() as conn:
                uow = UnitOfWork(conn)
                yield uow
                await uow.flush()
        else:
            async with self.writer.connect() as conn:  # closed unfinished: rolled back
                uow = UnitOfWork(conn, fastpaths.LAST in self.fast_paths)
                yield uow
                if not conn.in_transaction() and self.autocommit:
                    await conn.execution_options(isolation_level="AUTOCOMMIT")
                await uow.flush()
                await conn.commit()
        if uow.wrote_events:
            for hook in self.after_commit:
                hook()

    async def dispose(self) -> None:
        """Close the engine's pooled connections; the store is not used after this."""
        await self.engine.dispose()


class UnitOfWork:
    """The connection of one transaction, with the rows it queued (``insert``, ``emit``) to write last."""

    def __init__(self, conn: AsyncConnection, takes_last: bool = False) -> None:
        self.conn = conn
        # Whether ``last`` may be used: PostgreSQL, with the ``last`` fast path on.
        self.takes_last = takes_last and conn.dialect.name == "postgresql"
        self._queued: list[tuple[Table, dict[str, Any]]] = []
        self._last: tuple[Select[Any], CTE, dict[str, Any], Callable[[], Awaitable[NoReturn]]] | None = None
        self.wrote_events = False

    def last(
        self,
        statement: Select[Any],
        anchor: CTE,
        params: dict[str, Any],
        lost: Callable[[], Awaitable[NoReturn]],
    ) -> None:
        """Write ``statement`` (a data-modifying WITH, PostgreSQL only) last, with the queued rows.

        One statement: each queued row is selected from ``anchor``, one of its CTEs (a compare-and-set's
        ``UPDATE ... RETURNING``), so none is written unless it took its row. The statement must then
        answer a row; when it answers none, ``lost`` raises (and nothing was written).
        """
        if self._last is not None:
            raise RuntimeError("a unit of work has one last statement")
        self._last = (statement, anchor, params, lost)

    def insert(self, table: Table, row: dict[str, Any]) -> None:
        """Queue ``row`` for ``table``, written when the unit ends (``flush``).

        Every queued row goes in one statement on PostgreSQL: one round trip for the lot. The unit must
        not read the row back before then, nor write a row that needs it: ``flush`` first.
        """
        self._queued.append((table, row))

    def emit(self, destination: str, aggregate_id: str, type_: str, payload: Message) -> None:
        """Queue an event for ``destination``; it is written to the outbox in this transaction."""
        self.insert(OUTBOX, outbox_row(destination, aggregate_id, type_, payload))

    async def flush(self) -> None:
        """Write the rows queued so far, in this transaction.

        ``Database.transaction`` calls this before it commits; call it earlier only to make the rows
        visible to a later statement of the same unit of work.
        """
        queued, self._queued = self._queued, []
        last, self._last = self._last, None
        if any(table is OUTBOX for table, _ in queued):
            self.wrote_events = True
        if last is not None:
            statement, anchor, params, lost = last
            tables = _by_table(queued) if len(queued) <= _TOGETHER_MAX else None
            if tables is not None:  # the usual unit: everything in one statement
                shape, values = _shape(tables)
                written = _together(shape, statement, anchor)
                if (await self.conn.execute(written, {**params, **values})).first() is None:
                    await lost()
                return
            if (await self.conn.execute(statement, params)).first() is None:  # then its rows, one by one
                await lost()
        if not queued:
            return
        together = self.conn.dialect.name == "postgresql" and 1 < len(queued) <= _TOGETHER_MAX
        tables = _by_table(queued) if together else None
        if tables is None:  # in the order queued: SQLite checks each row's foreign keys at once
            for table, row in queued:
                await self.conn.execute(_insert(table), row)
            return
        shape, values = _shape(tables)
        await self.conn.execute(_together(shape), values)


def _shape(
    tables: dict[Table, list[dict[str, Any]]],
) -> tuple[tuple[tuple[Table, tuple[str, ...], int], ...], dict[str, Any]]:
    """``_together``'s shape of the rows by table, and their parameters."""
    shape = tuple((table, tuple(rows[0]), len(rows)) for table, rows in tables.items())
    values = {
        f"w{i}_{j}_{name}": value
        for i, rows in enumerate(tables.values())
        for j, row in enumerate(rows)
        for name, value in row.items()
    }
    return shape, values


def _by_table(queued: list[tuple[Table, dict[str, Any]]]) -> dict[Table, list[dict[str, Any]]] | None:
    """The queued rows by table, in the order queued; None when a table's rows name different columns."""
    tables: dict[Table, list[dict[str, Any]]] = {}
    for table, row in queued:
        rows = tables.setdefault(table, [])
        if rows and row.keys() != rows[0].keys():
            return None
        rows.append(row)
    return tables


# The most rows a unit of work writes in one statement; a longer queue (a bulk change's events) goes a
# row at a time rather than compiling a statement for each length.
_TOGETHER_MAX = 12


@lru_cache(maxsize=256)
def _together(
    shape: tuple[tuple[Table, tuple[str, ...], int], ...],
    last: Select[Any] | None = None,
    anchor: CTE | None = None,
) -> Select[Any]:
    """One statement inserting ``n`` rows into ``table`` for each ``(table, columns, n)`` of ``shape``.

    With ``last`` (``UnitOfWork.last``), that statement with the rows, each selected from ``anchor``. Its
    parameters are ``w<part>_<row>_<column>``. A data-modifying WITH, one INSERT per table: a
    table's rows take its serial ids in the order queued (the outbox's order), and PostgreSQL checks
    foreign keys at the statement's end, so the tables go in any order. Built once per shape, so each
    use reuses its compiled form without walking its cache key.
    """
    statement: Select[Any] = select(literal_column("1")) if last is None else last
    for i, (table, columns, n) in enumerate(shape):
        rows = [
            {name: bindparam(f"w{i}_{j}_{name}", type_=table.c[name].type) for name in columns}
            for j in range(n)
        ]
        if n == 1 and anchor is None:
            part = insert(table).values(rows[0])
        else:  # a multi-row VALUES is never cached; rows selected one after another are
            selects = [select(*(value.label(name) for name, value in row.items())) for row in rows]
            if anchor is not None:
                selects = [row.select_from(anchor) for row in selects]
            part = insert(table).from_select(columns, selects[0] if n == 1 else union_all(*selects))
        statement = statement.add_cte(part.cte(f"w{i}"))
    return statement


@cache
def _insert(table: Table) -> Insert:
    return insert(table)  # the row's keys name the columns
