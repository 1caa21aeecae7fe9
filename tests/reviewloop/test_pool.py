"""The PostgreSQL pool without a pre-ping: a server that dropped every connection costs one failed
statement per process, never a stuck pool."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from review_state.__main__ import SPEC
from reviewloop.config import ConfigError, ServiceSettings
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, make_engine
from reviewloop.storage.engine import DEFAULT_POOL_SIZE, POOL_GAUGE, pool_probe
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from tests.conftest import Databases

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def test_after_the_server_drops_the_pool_the_next_use_gets_a_fresh_connection(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    if db.is_sqlite:
        pytest.skip("SQLite has no server to drop connections")
    async with db.engine.connect() as a, db.engine.connect() as b, db.engine.connect() as killer:
        pids = [
            await a.scalar(text("SELECT pg_backend_pid()")),
            await b.scalar(text("SELECT pg_backend_pid()")),
        ]
        await a.commit()
        await b.commit()
        await killer.execute(
            text("SELECT pg_terminate_backend(pid) FROM unnest(CAST(:p AS int[])) pid"), {"p": pids}
        )
    failures = 0
    for _ in range(4):
        try:
            async with db.transaction() as uow:
                assert await uow.conn.scalar(text("SELECT 1")) == 1
        except DBAPIError as exc:
            assert exc.connection_invalidated
            failures += 1
    assert failures <= 1  # the first dead connection fails once; the pool then drops the others


async def test_the_pool_gauge_reads_used_and_idle_connections_from_the_pool(open_db: OpenDb) -> None:
    """``db.client.connections.usage`` is read on a scrape, with no counting on every checkout."""
    db = await open_db(SPEC)

    async def gauge() -> dict[str, float]:
        points = (await pool_probe(db.engine)())[POOL_GAUGE]
        return {attrs["state"]: value for value, attrs in points}

    async with db.engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
        held = await gauge()
    after = await gauge()
    assert held["used"] == after["used"] + 1
    assert after["idle"] >= 1  # the connection went back to the pool


async def test_a_load_above_the_pool_size_queues_on_the_connections_it_keeps(
    databases: Databases, backend: str
) -> None:
    """No connection is opened and closed per burst: the pool keeps what it opens, and never more."""
    if backend == "sqlite":
        pytest.skip("SQLite connections are files, not server sessions")
    engine = make_engine(await databases.url(backend, "pool"), pool_size=2)
    try:

        async def statement() -> int:
            async with engine.connect() as conn:
                return int(await conn.scalar(text("SELECT pg_backend_pid() FROM pg_sleep(0.02)")))

        sessions = set()
        for _ in range(3):  # bursts of eight, four times the pool
            sessions |= set(await asyncio.gather(*(statement() for _ in range(8))))
        assert len(sessions) == 2
    finally:
        await engine.dispose()


def test_the_pool_size_is_a_whole_number_of_at_least_one() -> None:
    assert ServiceSettings.from_env({}).db_pool_size == DEFAULT_POOL_SIZE
    assert ServiceSettings.from_env({"REVIEWLOOP_DB_POOL_SIZE": "5"}).db_pool_size == 5
    for wrong in ("0", "-1", "ten", ""):
        with pytest.raises(ConfigError, match="REVIEWLOOP_DB_POOL_SIZE"):
            ServiceSettings.from_env({"REVIEWLOOP_DB_POOL_SIZE": wrong})
