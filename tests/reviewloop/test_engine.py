"""The unit of work on each backend: concurrent writers all commit, and on SQLite a nested writer is a
clear error instead of a hang."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from google.protobuf.wrappers_pb2 import Int32Value
from review_state.__main__ import SPEC
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, make_engine, sqlite
from reviewloop.storage.schema import OUTBOX, Json, outbox_row
from sqlalchemy import (
    Column,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError

from tests.statements import statements

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def test_concurrent_writers_all_commit(open_db: OpenDb) -> None:
    db = await open_db(SPEC)

    async def write(n: int) -> None:
        async with db.transaction() as uow:
            uow.emit("nudge", f"rr_{n}", "nudge", Int32Value(value=n))
            await asyncio.sleep(0)  # yield inside the transaction, so the writers really overlap

    await asyncio.gather(*(write(n) for n in range(30)))
    async with db.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(OUTBOX))).scalar() == 30


async def test_one_statement_writes_commit_on_their_own_and_a_refused_one_leaves_nothing(
    open_db: OpenDb,
) -> None:
    """``Database.one_statement``: autocommit on PostgreSQL, the queued writer on SQLite."""
    db = await open_db(SPEC)
    rows = [outbox_row("nudge", f"rr_{n}", "nudge", Int32Value(value=n)) for n in range(20)]

    async def write(row: dict[str, object]) -> None:
        async with db.one_statement() as conn:
            await conn.execute(insert(OUTBOX).values(row))

    await asyncio.gather(*(write(row) for row in rows))
    with pytest.raises(IntegrityError):
        await write(rows[0])  # the same event id again
    async with db.single_statement.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(OUTBOX))).scalar() == 20


async def test_a_nested_writer_on_sqlite_is_refused_not_hung(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    if not db.is_sqlite:
        pytest.skip("PostgreSQL writers have a connection each; nesting them is legal")
    async with db.transaction():
        with pytest.raises(RuntimeError, match="inside another"):
            async with asyncio.timeout(5), db.transaction():
                pass
    async with db.transaction() as uow:  # the store is still writable afterwards
        uow.emit("nudge", "rr_1", "nudge", Int32Value())


async def test_the_sqlite_driver_keeps_the_dbapi_contract(tmp_path: Path) -> None:
    """One thread crossing per statement (storage/sqlite.py), with rows, rowcount, executemany and
    error translation exactly as SQLAlchemy's aiosqlite adapter gives them."""
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path}/contract.db")
    assert engine.dialect.driver == "aiosqlite" and engine.url.drivername == sqlite.DRIVER
    table = Table("t", MetaData(), Column("id", Integer, primary_key=True), Column("v", String(10)))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(table.metadata.create_all)
            await conn.execute(insert(table), [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
            changed = await conn.execute(update(table).where(table.c.v == "a").values(v="c"))
            assert changed.rowcount == 1
            assert (await conn.execute(select(table.c.v).order_by(table.c.id))).scalars().all() == ["c", "b"]
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(insert(table), {"id": 1, "v": "dup"})
        async with engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(table))).scalar() == 2
    finally:
        await engine.dispose()


async def test_opening_a_file_another_process_is_writing_waits_for_wal(tmp_path: Path) -> None:
    """Switching a file to WAL needs an exclusive lock that SQLite refuses at once while another
    connection writes in rollback mode (replicas opening a fresh store together failed at random):
    the connect waits for the writer instead, and the file ends in WAL."""
    path = tmp_path / "fresh.db"
    other = sqlite3.connect(path, isolation_level=None)  # a replica that has not switched yet
    other.execute("CREATE TABLE t (x INTEGER)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t VALUES (1)")
    asyncio.get_running_loop().call_later(0.3, other.commit)
    engine = make_engine(f"sqlite+aiosqlite:///{path}")
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
            assert (await conn.execute(text("SELECT x FROM t"))).scalar() == 1
    finally:
        await engine.dispose()
        other.close()


async def test_a_sqlite_connection_closed_inside_its_transaction_leaves_the_file_unlocked(
    tmp_path: Path,
) -> None:
    """A unit cancelled inside its transaction has its connection invalidated (closed). sqlite3 closes
    without a rollback and defers the close while one of the connection's statements is unfinalized, as
    SQLAlchemy's aiosqlite adapter leaves one after a failed statement: before ``RollbackOnClose`` the
    file stayed locked until the cycle collector ran, and the retry met "database is locked" (issue 34)."""
    path = tmp_path / "closed.db"
    engine = make_engine(f"sqlite+aiosqlite:///{path}")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY)")
            await conn.exec_driver_sql("INSERT INTO t VALUES (1)")
            await conn.commit()
            driver: Any = (await conn.get_raw_connection()).driver_connection
            failed = await driver.cursor()  # referenced to the end, as the error's traceback held it
            with pytest.raises(sqlite3.IntegrityError):
                await failed.execute("INSERT INTO t VALUES (1)")  # its statement stays unfinalized
            await driver.execute("BEGIN IMMEDIATE")
            await conn.invalidate()
        retry = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            retry.execute("BEGIN IMMEDIATE")  # "database is locked" while the closed one holds it
            retry.execute("INSERT INTO t VALUES (2)")
            retry.execute("COMMIT")
        finally:
            retry.close()
    finally:
        await engine.dispose()


async def test_queued_rows_are_written_together_in_order_or_not_at_all(open_db: OpenDb) -> None:
    """``UnitOfWork.insert``: rows queued across tables (a child before its parent) land when the unit
    ends, a table's rows in the order queued; one refused row (an event id taken) leaves none of them."""
    db = await open_db(SPEC)
    metadata = MetaData()
    parents = Table("uow_parents", metadata, Column("id", String(8), primary_key=True))
    children = Table(
        "uow_children",
        metadata,
        Column("id", String(8), primary_key=True),
        Column("parent_id", String(8), ForeignKey("uow_parents.id"), nullable=False),
    )
    async with db.writing() as conn:
        await conn.run_sync(metadata.create_all)
    events = [outbox_row("nudge", "rr_1", "nudge", Int32Value(value=n)) for n in range(3)]

    async def write(parent: str, *rows: dict[str, object]) -> None:
        async with db.transaction() as uow:
            if not db.is_sqlite:  # SQLite checks a foreign key at each row: a parent goes first there
                uow.insert(children, {"id": f"{parent}c", "parent_id": parent})
            uow.insert(parents, {"id": parent})
            if db.is_sqlite:
                uow.insert(children, {"id": f"{parent}c", "parent_id": parent})
            for row in rows:
                uow.insert(OUTBOX, row)

    await write("p1", *events)
    with pytest.raises(IntegrityError):
        await write("p2", outbox_row("nudge", "rr_2", "nudge", Int32Value(value=9)), events[0])
    async with db.single_statement.connect() as conn:
        assert (await conn.execute(select(parents.c.id))).scalars().all() == ["p1"]
        assert (await conn.execute(select(children.c.parent_id))).scalars().all() == ["p1"]
        written = (await conn.execute(select(OUTBOX.c.event_id).order_by(OUTBOX.c.id))).scalars().all()
    assert written == [e["event_id"] for e in events]


async def test_a_unit_whose_only_statement_is_its_queued_rows_sends_no_begin_on_postgresql(
    open_db: OpenDb,
) -> None:
    """Its rows go in autocommit, one round trip; a unit that runs a statement first is a transaction."""
    db = await open_db(SPEC)
    if db.is_sqlite:
        pytest.skip("SQLite's writer always begins IMMEDIATE, to queue behind the file's lock")
    sent: list[str] = []
    async with db.engine.connect() as one, db.engine.connect() as two:  # any the units may check out
        for conn in (one, two):
            raw = await conn.get_raw_connection()
            raw.driver_connection.add_query_logger(lambda record: sent.append(record.query.split()[0]))
    rows = [outbox_row("nudge", f"rr_{n}", "nudge", Int32Value(value=n)) for n in range(3)]
    async with db.transaction() as uow:
        uow.insert(OUTBOX, rows[0])
        uow.insert(OUTBOX, rows[1])
    assert not [q for q in sent if q.upper().startswith(("BEGIN", "COMMIT"))], sent
    async with db.transaction() as uow:
        await uow.conn.execute(select(func.count()).select_from(OUTBOX))
        uow.insert(OUTBOX, rows[2])
    assert [q.upper().rstrip(";") for q in sent if q.upper().startswith(("BEGIN", "COMMIT"))] == [
        "BEGIN",
        "COMMIT",
    ]
    async with db.single_statement.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(OUTBOX))).scalar() == 3


async def test_a_units_last_statement_carries_its_queued_rows_only_when_it_takes_its_row(
    open_db: OpenDb,
) -> None:
    """``UnitOfWork.last`` (PostgreSQL): one statement, sent in autocommit, whose queued rows are written
    only if its compare-and-set took its row; when it took none, ``lost`` raises and nothing is written."""
    db = await open_db(SPEC)
    if db.is_sqlite:
        pytest.skip("a data-modifying WITH is PostgreSQL's")
    metadata = MetaData()
    counters = Table(
        "uow_counters", metadata, Column("id", String(8), primary_key=True), Column("version", Integer)
    )
    async with db.writing() as conn:
        await conn.run_sync(metadata.create_all)
        await conn.execute(insert(counters).values(id="c", version=1))
    cas = (
        update(counters)
        .where(counters.c.id == "c", counters.c.version == bindparam("expected"))
        .values(version=counters.c.version + 1)
        .returning(counters.c.id)
        .cte("cas")
    )
    sent: list[str] = []  # what asyncpg sends as simple queries (BEGIN, COMMIT), not prepared ones

    def log(record: Any) -> None:
        sent.append(record.query.split()[0])

    def watch(dbapi_connection: Any, *_: Any) -> None:  # every connection a unit checks out
        dbapi_connection.driver_connection.add_query_logger(log)

    event.listen(db.engine.sync_engine.pool, "checkout", watch)

    class Lost(Exception):
        pass

    async def lost() -> NoReturn:
        raise Lost

    async def bump(expected: int, *events: dict[str, object]) -> None:
        async with db.transaction() as uow:
            for event in events:
                uow.insert(OUTBOX, event)
            uow.last(select(cas.c.id), cas, {"expected": expected}, lost)

    rows = [outbox_row("nudge", f"rr_{n}", "nudge", Int32Value(value=n)) for n in range(3)]
    with statements(db) as seen:
        await bump(1, rows[0], rows[1])
    assert [s.sql.split()[0] for s in seen] == ["WITH"]
    assert not [q for q in sent if q.upper().startswith(("BEGIN", "COMMIT"))], sent  # in autocommit
    with pytest.raises(Lost):
        await bump(1, rows[2])  # the version moved on
    await bump(2)  # a last statement with no rows of its own
    async with db.single_statement.connect() as conn:
        assert (await conn.execute(select(counters.c.version))).scalar() == 3
        written = (await conn.execute(select(OUTBOX.c.event_id).order_by(OUTBOX.c.id))).scalars().all()
    assert written == [rows[0]["event_id"], rows[1]["event_id"]]


async def test_a_json_column_reads_back_what_was_written(open_db: OpenDb) -> None:
    """JSON columns go through orjson: a value reads back as the standard library would have left it,
    keys that are not strings turned into strings, text beyond ASCII and large numbers intact."""
    db = await open_db(SPEC)
    metadata = MetaData()
    documents = Table(
        "json_documents", metadata, Column("id", Integer, primary_key=True), Column("body", Json)
    )
    async with db.writing() as conn:
        await conn.run_sync(metadata.create_all)
    written = {"to": ["zoë@example.com"], "n": 2**53 + 1, "ratio": 0.1, "nested": {"ok": None, 1: [True]}}
    async with db.transaction() as uow:
        uow.insert(documents, {"id": 1, "body": written})
    async with db.single_statement.connect() as conn:
        stored = (await conn.execute(select(documents.c.body))).scalar_one()
    assert stored == {**written, "nested": {"ok": None, "1": [True]}}
