"""The unit of work on each backend: concurrent writers all commit, and on SQLite a nested writer is a
clear error instead of a hang."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from review_state.__main__ import SPEC
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.storage.schema import OUTBOX
from sqlalchemy import func, select

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def test_concurrent_writers_all_commit(open_db: OpenDb) -> None:
    db = await open_db(SPEC)

    async def write(n: int) -> None:
        async with db.transaction() as uow:
            uow.emit("nudge", f"rr_{n}", "nudge", {"n": n})
            await asyncio.sleep(0)  # yield inside the transaction, so the writers really overlap

    await asyncio.gather(*(write(n) for n in range(30)))
    async with db.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(OUTBOX))).scalar() == 30


async def test_a_nested_writer_on_sqlite_is_refused_not_hung(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    if not db.is_sqlite:
        pytest.skip("PostgreSQL writers have a connection each; nesting them is legal")
    async with db.transaction():
        with pytest.raises(RuntimeError, match="inside another"):
            async with asyncio.timeout(5), db.transaction():
                pass
    async with db.transaction() as uow:  # the store is still writable afterwards
        uow.emit("nudge", "rr_1", "nudge", {})
