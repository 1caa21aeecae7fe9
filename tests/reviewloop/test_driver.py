"""PostgreSQL's one-statement work on the driver (``reviewloop.storage.driver``): the same answers, errors
and transactions as SQLAlchemy's execution gives, for a statement seen a second time in autocommit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import asyncpg.transaction
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reviewloop.storage import Database, make_engine
from reviewloop.storage.driver import DriverResult
from reviewloop.storage.schema import Json, UtcDateTime
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    MetaData,
    Numeric,
    String,
    Table,
    bindparam,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, ResourceClosedError, StatementError

from tests.conftest import Databases

metadata = MetaData()
things = Table(
    "things",
    metadata,
    Column("id", String, primary_key=True),
    Column("n", BigInteger, nullable=True),
    Column("ok", Boolean, nullable=True),
    Column("price", Numeric(12, 2), nullable=True),
    Column("at", UtcDateTime, nullable=True),
    Column("doc", Json, nullable=True),
    Column("note", String, nullable=True),
)
_ADD = insert(things)  # the parameters name the columns, as a queued row's do
_ONE = select(things).where(things.c.id == bindparam("id"))
_TOUCH = update(things).where(things.c.note == bindparam("which")).values(n=bindparam("b_n"))


@pytest.fixture
async def db(databases: Databases, backend: str) -> AsyncIterator[Database]:
    if backend == "sqlite":
        pytest.skip("the driver path is PostgreSQL's")
    store = Database(make_engine(await databases.url(backend, "driver")))
    async with store.engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)
        await conn.run_sync(metadata.create_all)
    yield store
    await store.dispose()


async def one(db: Database, statement: Any, params: dict[str, Any]) -> tuple[Any, Any]:
    """The result of ``statement`` run in autocommit, and its first row."""
    async with db.single_statement.connect() as conn:
        result = await conn.execute(statement, params)
        return result, result.first()


async def test_a_statement_seen_twice_runs_on_the_driver_with_sqlalchemys_answer(db: Database) -> None:
    at = datetime(2026, 12, 6, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    row = {
        "id": "t1",
        "n": 7,
        "ok": True,
        "price": Decimal("12.50"),
        "at": at,
        "doc": {"a": [1, "x"]},
        "note": None,
    }
    async with db.single_statement.connect() as conn:
        await conn.execute(_ADD, row)
    first, by_sqlalchemy = await one(db, _ONE, {"id": "t1"})
    second, by_driver = await one(db, _ONE, {"id": "t1"})
    assert not isinstance(first, DriverResult)
    assert isinstance(second, DriverResult)
    assert by_driver._mapping == by_sqlalchemy._mapping
    assert by_driver.at == at and by_driver.at.tzinfo == UTC  # UtcDateTime's result processor ran
    assert by_driver.price == Decimal("12.50") and by_driver.doc == {"a": [1, "x"]}
    assert (await one(db, _ONE, {"id": "absent"}))[1] is None


async def test_rowcount_is_the_statements_as_a_cursor_reports_it(db: Database) -> None:
    for i in range(3):
        async with db.single_statement.connect() as conn:
            await conn.execute(
                _ADD, {"id": f"r{i}", "n": 0, "ok": None, "price": None, "at": None, "doc": None, "note": "x"}
            )
    counts = []
    for n in (1, 2):
        async with db.single_statement.connect() as conn:
            result = await conn.execute(_TOUCH, {"which": "x", "b_n": n})
            counts.append((isinstance(result, DriverResult), result.rowcount))
    assert counts == [(False, 3), (True, 3)]


async def test_a_refused_statement_raises_sqlalchemys_error_and_writes_nothing(db: Database) -> None:
    row = {"id": "dup", "n": 1, "ok": None, "price": None, "at": None, "doc": None, "note": None}
    async with db.single_statement.connect() as conn:
        await conn.execute(_ADD, row)
    for _ in range(2):  # the SQLAlchemy path, then the driver's
        with pytest.raises(IntegrityError):
            async with db.single_statement.connect() as conn:
                await conn.execute(_ADD, {**row, "n": 2})
    assert (await one(db, _ONE, {"id": "dup"}))[1].n == 1


async def test_a_missing_value_is_sqlalchemys_error(db: Database) -> None:
    for _ in range(2):
        with pytest.raises(Exception, match="A value is required for bind parameter 'id'"):
            await one(db, _ONE, {})


async def test_a_statement_in_a_transaction_runs_in_it(db: Database) -> None:
    """On the driver, a transaction's statements (its first one too, which begins it) see its own rows,
    and a rollback takes back what they wrote."""
    row = {"id": "in-tx", "n": 1, "ok": None, "price": None, "at": None, "doc": None, "note": None}
    for _ in range(2):
        await one(db, _ONE, {"id": "in-tx"})
        async with db.engine.connect() as conn:  # seen twice: SQLAlchemy ran it, then the driver
            await conn.execute(_ADD, {**row, "id": "seen"})
            await conn.execute(things.delete().where(things.c.id == "seen"))
            await conn.commit()
    with pytest.raises(RuntimeError):
        async with db.transaction() as uow:
            wrote = await uow.conn.execute(_ADD, row)
            assert isinstance(wrote, DriverResult) and uow.conn.in_transaction()
            seen = await uow.conn.execute(_ONE, {"id": "in-tx"})
            assert isinstance(seen, DriverResult) and seen.one().n == 1
            raise RuntimeError("roll back")
    assert (await one(db, _ONE, {"id": "in-tx"}))[1] is None


async def test_a_failed_statement_fails_its_transaction_as_sqlalchemys_does(db: Database) -> None:
    row = {"id": "f", "n": 1, "ok": None, "price": None, "at": None, "doc": None, "note": None}
    async with db.single_statement.connect() as conn:  # seen once; now on the driver
        await conn.execute(_ADD, row)
    with pytest.raises(IntegrityError):
        async with db.transaction() as uow:
            await uow.conn.execute(_ADD, {**row, "id": "g"})
            await uow.conn.execute(_ADD, row)  # a duplicate key
    async with db.engine.connect() as conn:
        await conn.execute(_ADD, {**row, "id": "h"})
        with pytest.raises(IntegrityError):
            await conn.execute(_ADD, row)
        with pytest.raises(DBAPIError, match="current transaction is aborted"):
            await conn.execute(_ONE, {"id": "h"})
        await conn.rollback()
        assert (await conn.execute(_ONE, {"id": "h"})).first() is None
    assert (await one(db, _ONE, {"id": "g"}))[1] is None  # the first unit rolled back whole


async def test_a_dead_connection_fails_once_and_is_dropped_from_the_pool(db: Database) -> None:
    for _ in range(2):
        await one(db, _ONE, {"id": "x"})
    async with db.engine.connect() as killer:
        await killer.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    failures = 0
    for _ in range(3):
        try:
            await one(db, _ONE, {"id": "x"})
        except DBAPIError as exc:
            assert exc.connection_invalidated
            failures += 1
    assert failures <= 1


texts = st.one_of(
    st.none(),
    st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=40),
)
moments = st.one_of(
    st.none(),
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(2200, 1, 1),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7))]),
    ),
)
docs = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), texts.filter(lambda t: t is not None)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8).filter(lambda k: "\x00" not in k), inner, max_size=4),
    ),
    max_leaves=10,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    ok=st.one_of(st.none(), st.booleans()),
    price=st.one_of(
        st.none(),
        st.decimals(min_value=-(10**9), max_value=10**9, places=2, allow_nan=False, allow_infinity=False),
    ),
    at=moments,
    doc=docs,
    note=texts,
)
async def test_any_row_reads_back_the_same_on_both_paths(
    db: Database, n: Any, ok: Any, price: Any, at: Any, doc: Any, note: Any
) -> None:
    row = {"n": n, "ok": ok, "price": price, "at": at, "doc": doc, "note": note}
    async with db.engine.connect() as conn:  # a transaction: SQLAlchemy writes and reads
        await conn.execute(things.delete())
        await conn.execute(_ADD, {"id": "p", **row})
        by_sqlalchemy = (await conn.execute(_ONE, {"id": "p"})).first()
        await conn.commit()
    for _ in range(2):
        result, by_driver = await one(db, _ONE, {"id": "p"})
    assert isinstance(result, DriverResult)
    assert by_sqlalchemy is not None and by_driver is not None
    assert by_driver._mapping == by_sqlalchemy._mapping
    async with db.single_statement.connect() as conn:  # written by the driver, read by SQLAlchemy
        await conn.execute(things.delete())
        for _ in range(2):
            await conn.execute(things.delete())
            await conn.execute(_ADD, {"id": "p", **row})
    async with db.engine.connect() as conn:
        again = (await conn.execute(_ONE, {"id": "p"})).first()
    assert again is not None and again._mapping == by_sqlalchemy._mapping


async def test_an_expanding_list_runs_on_the_driver_for_each_length(db: Database) -> None:
    """An ``IN`` list gets its plan per length, as SQLAlchemy renders one SQL text per length."""
    for i in range(4):
        async with db.single_statement.connect() as conn:
            await conn.execute(
                _ADD,
                {"id": f"e{i}", "n": i, "ok": None, "price": None, "at": None, "doc": None, "note": None},
            )
    among = select(things.c.id).where(things.c.id.in_(bindparam("ids", expanding=True))).order_by(things.c.id)
    for ids in (["e1"], ["e1", "e3"], ["e0", "e2", "zz"], [], ["e1", "e3"], ["e1"], []):
        async with db.single_statement.connect() as conn:
            result = await conn.execute(among, {"ids": ids})
            assert [row.id for row in result] == sorted(set(ids) - {"zz"})
    async with db.single_statement.connect() as conn:
        assert isinstance(await conn.execute(among, {"ids": ["e2", "e0"]}), DriverResult)


async def test_a_literal_in_list_runs_on_the_driver(db: Database) -> None:
    for i in range(3):
        async with db.single_statement.connect() as conn:
            row = {"id": f"l{i}", "n": i, "ok": None, "price": None, "at": None, "doc": None, "note": None}
            written = await conn.execute(_ADD, row)
            with pytest.raises(ResourceClosedError):  # an INSERT answers no rows, on either path
                written.first()
    literal = (
        select(things.c.id)
        .where(things.c.n.in_((0, 2)), things.c.id != bindparam("other"))
        .order_by(things.c.id)
    )
    for _ in range(3):
        async with db.single_statement.connect() as conn:
            result = await conn.execute(literal, {"other": "l2"})
            assert [row.id for row in result] == ["l0"]
    assert isinstance(result, DriverResult)


async def test_a_value_that_does_not_bind_is_sqlalchemys_error(db: Database) -> None:
    """The driver path leaves a value its type cannot bind to SQLAlchemy, whose error names the statement."""
    row = {"id": "j", "n": 1, "ok": None, "price": None, "at": None, "doc": None, "note": None}
    for _ in range(2):
        async with db.single_statement.connect() as conn:
            await conn.execute(things.delete())
            await conn.execute(_ADD, row)
    with pytest.raises(StatementError, match="not JSON serializable"):
        async with db.single_statement.connect() as conn:
            await conn.execute(_ADD, {**row, "id": "k", "doc": object()})
    assert (await one(db, _ONE, {"id": "k"}))[1] is None


async def _cancel_inside_begin(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a unit of work whose task is cancelled after the server ran its BEGIN, before the answer."""
    entered = asyncio.Event()
    real = asyncpg.transaction.Transaction.start

    async def slow_start(self: Any) -> None:
        await real(self)
        entered.set()
        await asyncio.sleep(10)  # cancelled here: the server's transaction is open

    async def unit() -> None:
        async with db.transaction() as uow:
            await uow.conn.execute(_ONE, {"id": "none"})

    monkeypatch.setattr(asyncpg.transaction.Transaction, "start", slow_start)
    task = asyncio.create_task(unit())
    await asyncio.wait([task, asyncio.create_task(entered.wait())], return_when=asyncio.FIRST_COMPLETED)
    assert not task.done(), task.exception()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.undo()


async def test_a_unit_cancelled_in_its_begin_leaves_no_transaction_for_the_next(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One pooled connection, so the next unit gets the one the cancelled unit had. Before the fix the
    # next unit ran as a SAVEPOINT inside the cancelled unit's open transaction: it answered OK and its
    # row was never committed (issue 34's lost terminal nudges).
    url = await databases.url("postgresql", "driver_cancel")
    db = Database(make_engine(url, pool_size=1))
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
            await conn.run_sync(metadata.create_all)
        for _ in range(2):  # the second sighting of _ONE takes the driver path
            async with db.single_statement.connect() as conn:
                await conn.execute(_ONE, {"id": "none"})
        await _cancel_inside_begin(db, monkeypatch)
        async with db.transaction() as uow:
            await uow.conn.execute(_ONE, {"id": "none"})
            uow.insert(things, {"id": "kept", "n": 1})
        other = Database(make_engine(url))
        try:
            async with other.engine.connect() as conn:
                kept = (await conn.execute(select(things.c.id).where(things.c.id == "kept"))).scalars().all()
        finally:
            await other.dispose()
        assert list(kept) == ["kept"]
    finally:
        await db.dispose()
