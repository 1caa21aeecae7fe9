"""The storage fast paths (docs/performance.md's table): each switch turns its path off, the plain path
then gives the same answers and rows, and the private names the driver and SQLite paths lean on are still
there (a SQLAlchemy or aiosqlite release that moves them fails here, loudly, before anything subtler)."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from review_state import app
from review_state.__main__ import SPEC as REVIEW_STATE
from review_state.app import Env, Settings
from reviewloop.config import ServiceSettings
from reviewloop.service import ServiceSpec
from reviewloop.settings import ConfigError
from reviewloop.storage import Database, UnitOfWork, fastpaths, make_engine
from reviewloop.storage.driver import DriverEngine
from sqlalchemy import Column, MetaData, String, Table, bindparam, select, text
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg

from tests.conftest import Databases
from tests.review_state.conftest import AGENT, DRAFT, HUMAN, FakePeers, SwitchProvider

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]

metadata = MetaData()
notes = Table("notes", metadata, Column("id", String, primary_key=True), Column("body", String))
_ONE = select(notes.c.body).where(notes.c.id == bindparam("id"))


def test_the_switch_names_what_to_turn_off_and_refuses_a_name_it_does_not_know() -> None:
    def fast_paths(raw: str | None) -> frozenset[str]:
        return ServiceSettings.from_env({} if raw is None else {fastpaths.ENV: raw}).fast_paths

    assert fast_paths(None) == fast_paths("") == frozenset(fastpaths.NAMES)
    assert fast_paths("driver, last") == frozenset(fastpaths.NAMES) - {"driver", "last"}
    assert fast_paths("all") == frozenset()
    with pytest.raises(ConfigError, match="drivr"):
        fast_paths("drivr")


async def _workload(db: Database) -> list[Any]:
    """Every kind of storage work, each answer recorded: a unit of work, one-statement reads and writes."""
    async with db.engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)
        await conn.run_sync(metadata.create_all)
    answers: list[Any] = []
    for i in range(3):  # a statement seen twice takes the driver path
        async with db.transaction() as uow:
            uow.insert(notes, {"id": f"n{i}", "body": f"body {i}"})
        async with db.one_statement() as conn:
            result = await conn.execute(
                notes.update().where(notes.c.id == bindparam("nid")), {"nid": f"n{i}", "body": "x"}
            )
            answers.append(result.rowcount)
        async with db.single_statement.connect() as conn:
            answers.append((await conn.execute(_ONE, {"id": f"n{i}"})).all())
    async with db.engine.connect() as conn:
        answers.append((await conn.execute(select(notes).order_by(notes.c.id))).all())
    return answers


@pytest.mark.parametrize("name", [fastpaths.DRIVER, fastpaths.SQLITE_ONE_CROSSING, fastpaths.AUTOCOMMIT])
async def test_a_storage_path_switched_off_takes_the_plain_path_with_the_same_answers(
    databases: Databases, backend: str, name: str
) -> None:
    if (name == fastpaths.SQLITE_ONE_CROSSING) != (backend == "sqlite") and name != fastpaths.AUTOCOMMIT:
        pytest.skip(f"{name} is not a path of {backend}")
    fast = Database(make_engine(await databases.url(backend, "fast")))
    slow = fastpaths.enabled([name])
    plain = Database(make_engine(await databases.url(backend, "plain"), fast_paths=slow), slow)
    try:
        assert name in fast.fast_paths and name not in plain.fast_paths
        if name == fastpaths.DRIVER:
            assert isinstance(fast.engine, DriverEngine) and not isinstance(plain.engine, DriverEngine)
        elif name == fastpaths.SQLITE_ONE_CROSSING:
            assert fast.engine.url.drivername != plain.engine.url.drivername == "sqlite+aiosqlite"
        else:
            assert (
                fast.single_statement.get_execution_options()
                != plain.single_statement.get_execution_options()
            )
            assert plain.single_statement.get_execution_options() == {}
        assert await _workload(plain) == await _workload(fast)
    finally:
        await fast.dispose()
        await plain.dispose()


async def _decided(
    open_db: OpenDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow: str, lasts: list[int]
) -> tuple[Any, list[Any]]:
    """A submit, an open and an approve on a fresh store with ``slow`` switched off; the rows it leaves."""
    db = await open_db(REVIEW_STATE)
    db.fast_paths = db.fast_paths - {slow}
    env = Env(db, FakePeers(), SwitchProvider(tmp_path / slow), Settings(undo_window_s=0))
    calls = 0
    real = UnitOfWork.last

    def counted(self: UnitOfWork, *args: Any) -> None:
        nonlocal calls
        calls += 1
        real(self, *args)

    monkeypatch.setattr(UnitOfWork, "last", counted)
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="")
    )
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    review = await app.decide(env, HUMAN, review.id, app.Decision("approve", review.revision, review.version))
    lasts.append(calls)
    monkeypatch.undo()
    async with db.engine.connect() as conn:
        turns = (
            await conn.execute(
                text("SELECT seq, turn_type, actor_kind, revision, action, changed FROM turns ORDER BY seq")
            )
        ).all()
    return (review.state, review.revision, review.version), [tuple(row) for row in turns]


async def test_a_decision_with_last_switched_off_writes_the_same_rows(
    open_db: OpenDb, tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "sqlite":
        pytest.skip("UnitOfWork.last is PostgreSQL's")
    lasts: list[int] = []
    plain = await _decided(open_db, tmp_path, monkeypatch, fastpaths.LAST, lasts)
    fast = await _decided(open_db, tmp_path, monkeypatch, "none", lasts)
    assert plain == fast
    assert lasts[0] == 0 < lasts[1]  # the fast run took the path, the plain one did not


def test_the_private_names_the_fast_paths_lean_on_are_still_there() -> None:
    # driver.py: the compiled statement's positional binding and processors, the asyncpg adapter's
    # statement cache, transaction start, mutex and error mapping. sqlite.py: aiosqlite's _execute, _conn.
    versions = {name: importlib.metadata.version(name) for name in ("sqlalchemy", "aiosqlite")}
    assert versions["sqlalchemy"].startswith("2.0."), versions  # pyproject holds it below 2.1
    assert not versions["aiosqlite"].startswith(("0.23", "1.")), versions
    adapter = pg_asyncpg.AsyncAdapt_asyncpg_connection
    for attribute in ("_prepare", "_start_transaction", "_handle_exception", "_execute_mutex"):
        assert hasattr(adapter, attribute) or attribute in getattr(adapter, "__slots__", ()), attribute
    compiled: Any = _ONE.compile(dialect=pg_asyncpg.dialect())
    for attribute in (
        "positiontup",
        "_bind_processors",
        "_result_columns",
        "bind_names",
        "post_compile_params",
    ):
        assert hasattr(compiled, attribute), attribute
    assert hasattr(compiled, "construct_expanded_state")
    import aiosqlite.core

    assert hasattr(aiosqlite.core.Connection, "_execute")
