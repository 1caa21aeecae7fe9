"""A store that does not answer is ``503 unavailable`` with Retry-After, never ``500 internal``: the
deployment's weather (PostgreSQL at its connection limit, a connection an administrator terminated) is
something a keyed client retries, and the retry, once the store answers again, does the work once.

Seen on a quiet box: the lifecycle bench's stacks overran PostgreSQL's 100 connections and every call that
needed a new one answered a 500 (``TooManyConnectionsError`` logged as an unhandled error)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import make_url
from stack.launcher import Stack

from tests.conftest import Api, Databases, _pg_server, draft, start_stack


@pytest.fixture(scope="module")
async def pg_stack(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Stack, str]]:
    """A stack whose review_state connects as a role of its own (a superuser ignores connection limits), so
    the test can hold that role at its limit as a full server would hold everyone."""
    server = make_url(_pg_server()).set(drivername="postgresql")
    role = f"rl_role_{uuid.uuid4().hex[:10]}"
    store = make_url(await databases.url("postgres", "review_state"))
    admin = await asyncpg.connect(server.render_as_string(hide_password=False))
    await admin.execute(f'CREATE ROLE "{role}" LOGIN')
    await admin.execute(f'ALTER DATABASE "{store.database}" OWNER TO "{role}"')
    env = {"REVIEWLOOP_REVIEW_STATE_DB": store.set(username=role).render_as_string(hide_password=False)}
    running = await start_stack(databases, "postgres", tmp_path_factory.mktemp("unavailable"), env)
    try:
        yield running, role
    finally:
        running.stop_all()
        await admin.execute(f'DROP DATABASE "{store.database}" WITH (FORCE)')  # the role's tables with it
        await admin.execute(f'DROP ROLE "{role}"')
        await admin.close()


async def test_a_store_refusing_connections_is_503_unavailable_and_the_keyed_retry_lands_once(
    pg_stack: tuple[Stack, str],
) -> None:
    stack, role = pg_stack
    api = Api(stack)
    admin = await asyncpg.connect(make_url(_pg_server()).set(drivername="postgresql").render_as_string(False))
    try:
        agent = await api.agent()
        warm = await api.http.post("/v1/messages", json=draft(), headers=agent)
        assert warm.status_code == 202, warm.text

        # review_state's role is at its connection limit, and its pooled connections are gone.
        await admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT 0')
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
        keyed = {**agent, "Idempotency-Key": "while-the-store-is-full"}
        for _ in range(2):  # the dropped pooled connection, then a refused new one
            refused = await api.http.post("/v1/messages", json=draft(subject="Held"), headers=keyed)
            assert refused.status_code == 503, refused.text
            assert refused.json()["code"] == "unavailable"
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert int(refused.headers["Retry-After"]) >= 1

        await admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT -1')
        landed = await api.http.post("/v1/messages", json=draft(subject="Held"), headers=keyed)
        assert landed.status_code == 202, landed.text
        again = await api.http.post("/v1/messages", json=draft(subject="Held"), headers=keyed)
        assert again.status_code == 202 and again.json()["review_id"] == landed.json()["review_id"]
        listed = await api.http.get("/v1/reviews", params={"state": "needs_review"}, headers=agent)
        assert listed.status_code == 200, listed.text
        held = [r for r in listed.json()["items"] if r["subject"] == "Held"]
        assert len(held) == 1, held
    finally:
        await admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT -1')
        await admin.close()
        await api.http.aclose()
