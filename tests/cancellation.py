"""Cancelling a unit of work at each of its awaits (issue 34).

A caller going away (a client timeout, a deploy, a crash: grpc.aio cancels the handler) cancels the task
running a unit of work at whatever ``await`` it is in. ``Interrupter`` hooks a store's connections
below SQLAlchemy, at the driver's round trips, so the driver fast path (``storage.driver``) and
SQLAlchemy's own execution are interrupted alike (an engine event would turn the fast path off):

- PostgreSQL: asyncpg's protocol, whose coroutines (``query`` for BEGIN/COMMIT/ROLLBACK, ``prepare``,
  ``bind_execute``...) are each one round trip;
- SQLite: aiosqlite's ``_execute``, each one crossing to its thread (a statement, COMMIT, ROLLBACK).

Armed for the Nth round trip of one task, it cancels that task either before the round trip starts
(``BEFORE``) or once its request is on its way and before its answer is read (``DURING``: the server may
have done it, a COMMIT among them). ``each_await`` runs a call cancelled at round trip 1, 2, ... until
the call gets through, and after each cancellation checks that every connection went back to the pool
clean (outside any transaction), then retries the same call: the test's ``verify`` checks, from a
connection of its own, that exactly one effect is durable and that the retry answered as a replay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import asyncpg
from reviewloop.storage import Database, make_engine
from sqlalchemy import event, text

T = TypeVar("T")

BEFORE = "before"
DURING = "during"
MODES = (BEFORE, DURING)

# asyncpg's protocol coroutines: each is one round trip to the server.
_PROTOCOL_CALLS = frozenset(
    {"query", "prepare", "bind_execute", "bind_execute_many", "bind", "execute", "close_statement"}
)


class Cancelled(Exception):
    """The call was cancelled where the interrupter was armed."""


@dataclass
class _Armed:
    task: asyncio.Task[Any]
    at: int
    mode: str
    seen: int = 0
    fired: bool = False


class _Protocol:
    """asyncpg's protocol with each round trip counted by the interrupter."""

    def __init__(self, protocol: Any, interrupter: Interrupter) -> None:
        self._real = protocol
        self._interrupter = interrupter

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._real, name)
        if name not in _PROTOCOL_CALLS:
            return attribute
        interrupter = self._interrupter

        async def round_trip(*args: Any, **kwargs: Any) -> Any:
            interrupter.reached()
            return await attribute(*args, **kwargs)

        return round_trip


def _is_asyncpg(raw: Any) -> bool:
    """Whether a pooled connection's driver connection is asyncpg's (else aiosqlite's)."""
    return isinstance(raw, asyncpg.Connection)


@dataclass
class Interrupter:
    """Cancels one task at its Nth round trip on ``db``'s connections (see the module)."""

    db: Database
    armed: _Armed | None = None
    dirty: list[str] = field(default_factory=list)  # connections returned to the pool in a transaction

    def __post_init__(self) -> None:
        sync = self.db.engine.sync_engine
        event.listen(sync, "checkout", self._hook)
        event.listen(sync.pool, "checkin", self._checkin)

    def close(self) -> None:
        sync = self.db.engine.sync_engine
        event.remove(sync, "checkout", self._hook)
        event.remove(sync.pool, "checkin", self._checkin)

    def _hook(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        raw: Any = dbapi_connection._connection
        if _is_asyncpg(raw):
            if not isinstance(raw._protocol, _Protocol):
                raw._protocol = _Protocol(raw._protocol, self)
            return
        if getattr(raw, "_interrupted", False):
            return
        execute = raw._execute
        interrupter = self

        async def crossing(fn: Any, *args: Any, **kwargs: Any) -> Any:
            interrupter.reached()
            return await execute(fn, *args, **kwargs)

        raw._execute = crossing
        raw._interrupted = True

    def _checkin(self, dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is None:  # invalidated: closed, nothing to leak
            return
        raw: Any = dbapi_connection._connection
        if _is_asyncpg(raw):
            if raw.is_closed():
                return
            if raw._top_xact is not None or raw.is_in_transaction() or dbapi_connection._started:
                self.dirty.append(f"asyncpg connection returned in a transaction (top {raw._top_xact!r})")
        elif raw._connection is not None and raw._conn.in_transaction:
            self.dirty.append("sqlite connection returned in a transaction")

    def reached(self) -> None:
        """A round trip is about to start: cancel the armed task if it is its Nth."""
        armed = self.armed
        if armed is None or armed.fired or asyncio.current_task() is not armed.task:
            return
        armed.seen += 1
        if armed.seen < armed.at:
            return
        armed.fired = True
        if armed.mode == BEFORE:
            raise asyncio.CancelledError()
        asyncio.get_running_loop().call_soon(armed.task.cancel)

    async def run(self, call: Callable[[], Awaitable[T]], at: int, mode: str) -> T:
        """``call`` in a task of its own, cancelled at its ``at``-th round trip; ``Cancelled`` if it was."""
        task = asyncio.ensure_future(call())
        self.armed = _Armed(task, at, mode)
        try:
            return await task
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise  # the test itself is being cancelled
            raise Cancelled from None
        finally:
            self.armed = None


@dataclass
class Attempt(Generic[T]):
    """One scenario of ``each_await``: the call and how to check the store after it."""

    call: Callable[[], Awaitable[T]]
    # Given the retry's answer: assert exactly one effect is durable (read from a connection of the
    # check's own) and that a call after it answers as a replay.
    verify: Callable[[T], Awaitable[None]]


async def each_await(
    db: Database,
    attempt: Callable[[], Awaitable[Attempt[Any]]],
    *,
    modes: tuple[str, ...] = MODES,
    limit: int = 60,
) -> int:
    """Run a fresh ``attempt()``'s call cancelled at each of its round trips in turn, in each mode.

    After each cancellation: every connection went back to the pool clean, none of this database's
    server sessions is left in a transaction, and the retried call leaves exactly one effect
    (``Attempt.verify``). Returns how many cancellations were tried (at least one per mode).
    """
    interrupter = Interrupter(db)
    sessions = _Sessions(db)
    tried = 0
    try:
        for _ in range(2):  # the driver path plans a statement on its second sighting: see every one twice
            warm = await attempt()
            await warm.verify(await warm.call())
        for mode in modes:
            for at in range(1, limit + 1):
                scenario = await attempt()
                try:
                    answer = await interrupter.run(scenario.call, at, mode)
                except Cancelled:
                    tried += 1
                else:
                    assert at > 1, f"{mode}: the call made no round trip to cancel"
                    await scenario.verify(answer)
                    break
                await sessions.settled()
                assert not interrupter.dirty, f"cancelled {mode} round trip {at}: {interrupter.dirty}"
                answer = await scenario.call()
                try:
                    await scenario.verify(answer)
                except AssertionError as failure:
                    raise AssertionError(f"cancelled {mode} round trip {at}: {failure}") from failure
            else:
                raise AssertionError(f"{mode}: the call still made round trips after {limit}")
    finally:
        interrupter.close()
        await sessions.close()
    return tried


class _Sessions:
    """The server sessions of ``db``'s database, read on a connection of their own (PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.conn: asyncpg.Connection | None = None

    async def settled(self) -> None:
        """Wait for the store's cancelled work to end, then check none of its sessions is in a transaction.

        A cancelled round trip's CancelRequest goes on a connection of its own, and a terminated
        connection's backend ends a moment later: both are waited for.
        """
        if self.db.is_sqlite:
            await asyncio.sleep(0)
            return
        url = self.db.engine.url
        if self.conn is None:
            self.conn = await asyncpg.connect(
                url.set(drivername="postgresql").render_as_string(hide_password=False)
            )
        for _ in range(100):
            stuck = await self.conn.fetch(
                "SELECT pid, state, query FROM pg_stat_activity"
                " WHERE datname = $1 AND pid <> pg_backend_pid()"
                " AND state IN ('idle in transaction', 'idle in transaction (aborted)', 'active')",
                url.database,
            )
            if not stuck:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"server sessions left in a transaction: {[dict(r) for r in stuck]}")

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


async def observer(db: Database) -> Database:
    """A store on the same database with connections of its own: what is durable, seen from outside."""
    return Database(make_engine(db.engine.url.render_as_string(hide_password=False)))


async def count(db: Database, sql: str, **params: Any) -> int:
    """``sql``'s single number, read on a connection of ``db``'s own."""
    async with db.engine.connect() as conn:
        return int((await conn.execute(text(sql), params)).scalar_one())
