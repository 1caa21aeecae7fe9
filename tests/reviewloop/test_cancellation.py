"""Every unit of work is atomic under cancellation (issue 34): the storage's paths, cancelled at each
round trip (``tests.cancellation``), leave the whole effect or none, an OK means durable, and every
connection goes back to the pool outside any transaction.

Before the fix a unit cancelled during the BEGIN the driver path sends (``DriverConnection._run``) went
back to the pool inside an open transaction, and the next unit on that connection ran as a savepoint of
it: it answered OK and was never durable (the 7 reviews without their terminal nudge).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import pytest
from google.protobuf.wrappers_pb2 import Int32Value
from review_state.__main__ import SPEC
from reviewloop.ids import new_id
from reviewloop.storage import Database, fastpaths
from reviewloop.storage.schema import OUTBOX, first_delivery, outbox_row
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from tests.cancellation import Attempt, count, each_await, observer

OpenDb = Callable[..., Awaitable[Database]]  # (spec, fast_paths=ALL)


@pytest.fixture(params=["fast", "plain"])
async def dbs(open_db: OpenDb, request: pytest.FixtureRequest) -> AsyncIterator[tuple[Database, Database]]:
    """The store under test and an observer of the same database on connections of its own; with the
    storage's fast paths on, and with every one off (SQLAlchemy's own execution, BEGIN ... COMMIT)."""
    db = await open_db(SPEC, fastpaths.enabled(["all"]) if request.param == "plain" else fastpaths.ALL)
    seen = await observer(db)
    yield db, seen
    await seen.dispose()


async def _one_event(seen: Database, event_id: str, aggregate_id: str) -> None:
    assert await count(seen, "SELECT count(*) FROM inbox WHERE event_id = :e", e=event_id) == 1
    assert await count(seen, "SELECT count(*) FROM outbox WHERE aggregate_id = :a", a=aggregate_id) == 1


async def test_an_inbox_unit_cancelled_at_any_round_trip_is_all_or_nothing(
    dbs: tuple[Database, Database],
) -> None:
    """The inbox's unit (``ingest_each``): the event id recorded and its effect written, in a transaction
    the driver path begins."""
    db, seen = dbs

    async def attempt() -> Attempt[bool]:
        event_id, aggregate_id = new_id("evt"), new_id("rr")

        async def call() -> bool:
            async with db.transaction() as uow:
                first = await first_delivery(uow.conn, event_id)
                if first:
                    uow.emit("nudge", aggregate_id, "nudge", Int32Value(value=1))
            return first

        async def verify(_first: bool) -> None:
            await _one_event(seen, event_id, aggregate_id)
            assert await call() is False  # a replay

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 4


async def test_a_one_statement_write_cancelled_at_any_round_trip_is_all_or_nothing(
    dbs: tuple[Database, Database],
) -> None:
    """``Database.one_statement``: autocommit on PostgreSQL, a queued BEGIN IMMEDIATE on SQLite."""
    db, seen = dbs

    async def attempt() -> Attempt[bool]:
        event_id = new_id("evt")

        async def call() -> bool:
            async with db.one_statement() as conn:
                return await first_delivery(conn, event_id)

        async def verify(_first: bool) -> None:
            assert await count(seen, "SELECT count(*) FROM inbox WHERE event_id = :e", e=event_id) == 1
            assert await call() is False

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 2


async def test_a_unit_of_queued_rows_only_cancelled_at_any_round_trip_is_all_or_nothing(
    dbs: tuple[Database, Database],
) -> None:
    """``Database.transaction`` whose only statement is its queued rows (autocommit on PostgreSQL), then a
    read on a single-statement connection.

    On SQLAlchemy's own aiosqlite adapter (``plain``) the retry once met "database is locked": the unit
    cancelled after its BEGIN IMMEDIATE had its connection closed without a rollback, and the close
    waited on a statement an earlier duplicate's IntegrityError left unfinalized (``RollbackOnClose``).
    """
    db, seen = dbs

    async def attempt() -> Attempt[str]:
        rows = [outbox_row("nudge", new_id("rr"), "nudge", Int32Value(value=n)) for n in range(2)]

        async def call() -> str:
            try:
                async with db.transaction() as uow:
                    for row in rows:
                        uow.insert(OUTBOX, row)
            except IntegrityError:
                return "duplicate"
            async with db.single_statement.connect() as conn:
                ids = [row["event_id"] for row in rows]
                found = (
                    await conn.execute(select(OUTBOX.c.event_id).where(OUTBOX.c.event_id.in_(ids)))
                ).all()
            assert len(found) == 2  # an OK is visible at once
            return "written"

        async def verify(_answer: str) -> None:
            for row in rows:
                assert (
                    await count(seen, "SELECT count(*) FROM outbox WHERE event_id = :e", e=row["event_id"])
                    == 1
                )
            assert await call() == "duplicate"

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 2


async def test_a_units_last_statement_cancelled_at_any_round_trip_is_all_or_nothing(
    dbs: tuple[Database, Database],
) -> None:
    """``UnitOfWork.last`` (PostgreSQL): a compare-and-set carrying its rows, in autocommit."""
    db, seen = dbs
    if db.is_sqlite:
        pytest.skip("a data-modifying WITH is PostgreSQL's")
    metadata = MetaData()
    counters = Table(
        "cancel_counters", metadata, Column("id", String(40), primary_key=True), Column("version", Integer)
    )
    async with db.writing() as conn:
        await conn.run_sync(metadata.create_all)
    cas = (
        update(counters)
        .where(counters.c.id == bindparam("counter"), counters.c.version == bindparam("expected"))
        .values(version=counters.c.version + 1)
        .returning(counters.c.id)
        .cte("cas")
    )

    class Lost(Exception):
        pass

    async def lost() -> NoReturn:
        raise Lost

    async def attempt() -> Attempt[str]:
        counter, aggregate_id = uuid.uuid4().hex, new_id("rr")
        async with db.writing() as conn:
            await conn.execute(insert(counters).values(id=counter, version=1))

        async def call() -> str:
            try:
                async with db.transaction() as uow:
                    uow.emit("nudge", aggregate_id, "nudge", Int32Value(value=1))
                    uow.last(select(cas.c.id), cas, {"counter": counter, "expected": 1}, lost)
            except Lost:
                return "lost"
            return "taken"

        async def verify(_answer: str) -> None:
            assert await count(seen, "SELECT version FROM cancel_counters WHERE id = :c", c=counter) == 2
            assert (
                await count(seen, "SELECT count(*) FROM outbox WHERE aggregate_id = :a", a=aggregate_id) == 1
            )
            assert await call() == "lost"  # the version moved on: a retry takes nothing

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 2


async def test_a_read_cancelled_at_any_round_trip_leaves_its_connection_clean(
    dbs: tuple[Database, Database],
) -> None:
    """Reads, on a single-statement connection (autocommit) and in a transaction, then a write on the
    same pool: what the write answers is durable."""
    db, seen = dbs

    async def attempt() -> Attempt[Any]:
        event_id = new_id("evt")

        async def call() -> bool:
            async with db.single_statement.connect() as conn:
                await conn.execute(select(OUTBOX.c.id).limit(1))
            async with db.engine.connect() as conn:
                await conn.execute(select(OUTBOX.c.id).limit(1))
                await conn.execute(select(OUTBOX.c.event_id).limit(1))
            async with db.transaction() as uow:
                return await first_delivery(uow.conn, event_id)

        async def verify(_first: bool) -> None:
            assert await count(seen, "SELECT count(*) FROM inbox WHERE event_id = :e", e=event_id) == 1
            assert await call() is False

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 4
