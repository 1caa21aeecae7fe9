"""Every store's migrations build exactly the schema its code declares, on SQLite and PostgreSQL: a
table or index added to the metadata without its revision fails here, not on a user's upgrade."""

from __future__ import annotations

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
from reviewloop.storage import Database
from rules.__main__ import SPEC as RULES

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
