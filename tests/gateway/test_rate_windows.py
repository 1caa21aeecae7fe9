"""The rate limits' windows, counted in the gateway's own store: every window of a request in one upsert."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from gateway.asgi import MIGRATIONS
from gateway.ratelimits import StoreStorage
from gateway.store import metadata, rate_limit_counters
from reviewloop.storage import Database
from sqlalchemy import update

GATEWAY = SimpleNamespace(name="gateway", migrations_dir=MIGRATIONS, metadata=metadata)


async def test_each_window_counts_on_its_own_and_an_ended_one_starts_again(
    open_db: Callable[[Any], Awaitable[Database]],
) -> None:
    db = await open_db(GATEWAY)
    storage = StoreStorage(db)
    assert await storage.incr_many({"key": 60, "project": 3600}) == {"key": 1, "project": 1}
    assert await storage.incr_many({"key": 60, "project": 3600}, amount=2) == {"key": 3, "project": 3}
    async with db.one_statement() as conn:  # the key's minute has passed; the project's hour has not
        await conn.execute(
            update(rate_limit_counters).where(rate_limit_counters.c.limit_key == "key").values(expires_at=0)
        )
    assert await storage.incr_many({"key": 60, "project": 3600}) == {"key": 1, "project": 4}
    assert await storage.incr("key", 60) == 2  # limits' own verb is the one-window case
    assert await storage.get("project") == 4
    assert time.time() + 3590 < await storage.get_expiry("project") <= time.time() + 3600


async def test_concurrent_requests_each_see_their_own_count(
    open_db: Callable[[Any], Awaitable[Database]],
) -> None:
    """Twenty requests at once: no hit is lost, and no two requests are told the same count."""
    storage = StoreStorage(await open_db(GATEWAY))
    seen = await asyncio.gather(*(storage.incr_many({"k": 60, "p": 60}) for _ in range(20)))
    assert sorted(s["k"] for s in seen) == list(range(1, 21))
    assert sorted(s["p"] for s in seen) == list(range(1, 21))
