"""Every store's migrations build exactly the schema its code declares, on SQLite and PostgreSQL: a
table or index added to the metadata without its revision fails here, not on a user's upgrade."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from diff.__main__ import SPEC as DIFF
from dispatch_budget.__main__ import SPEC as DISPATCH_BUDGET
from gateway.asgi import MIGRATIONS as GATEWAY_MIGRATIONS
from gateway.store import metadata as gateway_metadata
from nudge.__main__ import SPEC as NUDGE
from review_state.__main__ import SPEC as REVIEW_STATE
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, make_engine
from reviewloop.storage.migrations import migrate
from rules.__main__ import SPEC as RULES

from tests.conftest import Databases

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
GATEWAY = ServiceSpec("gateway", gateway_metadata, GATEWAY_MIGRATIONS, lambda db, peers: ())


@pytest.mark.parametrize(
    "spec", [REVIEW_STATE, RULES, DIFF, NUDGE, DISPATCH_BUDGET, GATEWAY], ids=lambda s: s.name
)
async def test_migrations_match_the_declared_schema(open_db: OpenDb, spec: ServiceSpec) -> None:
    db = await open_db(spec)

    def differences(sync_conn: Any) -> list[Any]:
        return list(compare_metadata(MigrationContext.configure(sync_conn), spec.metadata))

    async with db.engine.connect() as conn:
        found = await conn.run_sync(differences)
    assert found == []


@pytest.mark.parametrize("spec", [REVIEW_STATE, NUDGE], ids=lambda s: s.name)
async def test_four_replicas_migrating_a_fresh_store_at_once_all_come_up(
    databases: Databases, backend: str, spec: ServiceSpec
) -> None:
    """Replicas that boot together on a fresh database take turns (an advisory lock on PostgreSQL, the
    write lock on SQLite): every one comes up on the migrated schema, none fails on a half-made one."""
    url = await databases.url(backend, spec.name)
    engines = [make_engine(url) for _ in range(4)]
    try:
        results = await asyncio.gather(
            *(migrate(engine, spec.migrations_dir, spec.metadata) for engine in engines),
            return_exceptions=True,
        )
        assert [r for r in results if isinstance(r, BaseException)] == []

        def differences(sync_conn: Any) -> list[Any]:
            return list(compare_metadata(MigrationContext.configure(sync_conn), spec.metadata))

        async with engines[0].connect() as conn:
            assert await conn.run_sync(differences) == []
    finally:
        for engine in engines:
            await engine.dispose()
