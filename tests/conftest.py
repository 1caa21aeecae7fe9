"""Shared fixtures: fresh databases on SQLite and PostgreSQL, and whole stacks of real processes."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from gateway.settings import DEFAULT_RATE_LIMITS, rate_limit_env
from hypothesis import settings
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, fastpaths, make_engine
from reviewloop.storage.migrations import migrate
from sqlalchemy.engine import make_url
from stack.launcher import ALL, MONOLITH, Stack, free_port
from stack.topology import GATEWAY, SERVICES

# CI replays the same examples on every run, so a landing never hangs on a lucky draw; local runs
# keep exploring fresh ones (and a failure found there is pinned with @example).
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

PG_ENV = "REVIEWLOOP_TEST_POSTGRES"
ADMIN_TOKEN = "rladm_test_" + uuid.uuid4().hex
BACKENDS = ["sqlite", "postgres"]
# How the parts trust each other: plain calls on loopback (the embedded default), or the production
# overlay's settings (a signed service token and mutual TLS). Every push test runs under both (issue 36).
TRUSTS = ["loopback", "production_trust"]
STACK_PARAMS = [pytest.param((b, t), id=f"{b}-{t}") for b in BACKENDS for t in TRUSTS]


def _pg_server() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} names no PostgreSQL server")
    return url


class Databases:
    """Creates uniquely named databases for one test session and drops them at its end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.created: list[str] = []

    async def url(self, backend: str, name: str) -> str:
        unique = f"rl_{name}_{uuid.uuid4().hex[:10]}"
        if backend == "sqlite":
            return f"sqlite+aiosqlite:///{self.tmp / unique}.db"
        server = make_url(_pg_server())
        admin = await asyncpg.connect(
            server.set(drivername="postgresql").render_as_string(hide_password=False)
        )
        try:
            await admin.execute(f'CREATE DATABASE "{unique}"')
        finally:
            await admin.close()
        self.created.append(unique)
        return server.set(drivername="postgresql+asyncpg", database=unique).render_as_string(
            hide_password=False
        )

    async def drop_all(self) -> None:
        if not self.created:
            return
        server = make_url(_pg_server())
        admin = await asyncpg.connect(
            server.set(drivername="postgresql").render_as_string(hide_password=False)
        )
        try:
            for name in self.created:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture(scope="session")
async def databases(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Databases]:
    dbs = Databases(tmp_path_factory.mktemp("db"))
    yield dbs
    await dbs.drop_all()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def open_db(
    databases: Databases, backend: str
) -> AsyncIterator[Callable[[ServiceSpec], Awaitable[Database]]]:
    """Opens a fresh, migrated store for a service spec on the parametrized backend."""
    opened: list[Database] = []

    async def open_(spec: ServiceSpec, fast_paths: frozenset[str] = fastpaths.ALL) -> Database:
        url = await databases.url(backend, spec.name)
        db = Database(make_engine(url, fast_paths=fast_paths), fast_paths)
        await migrate(db.engine, spec.migrations_dir, spec.metadata)
        opened.append(db)
        return db

    yield open_
    for db in opened:
        await db.dispose()


# REVIEWLOOP_TEST_TARGET=all runs the stacks of the tests in monolithic mode (``reviewloop up --target
# all``); a test that stops or restarts one part needs microservices mode (the default) and says so with
# ``@pytest.mark.microservices_only("why")``.
TARGET_ENV = "REVIEWLOOP_TEST_TARGET"


def stack_target() -> str:
    return os.environ.get(TARGET_ENV, "microservices")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "microservices_only(reason): stops or kills one part alone, which monolithic mode cannot "
        f"(skipped under {TARGET_ENV}=all)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if stack_target() != "all":
        return
    for item in items:
        marker = item.get_closest_marker("microservices_only")
        if marker is not None:
            reason = marker.args[0] if marker.args else "needs one part alone"
            item.add_marker(pytest.mark.skip(reason=f"microservices only: {reason}"))


def part_log(stack: Stack, name: str) -> Path:
    """The log ``name``'s lines go to: its own, or in monolithic mode the one process's."""
    return stack.log_path(MONOLITH if MONOLITH in stack.procs else name)


async def start_stack(
    databases: Databases,
    backend: str,
    data_dir: Path,
    extra_env: dict[str, str] | None = None,
    # Generous: on the shared two-core box a gateway alone took 10-20 s to import under load, and a stack
    # over a minute to serve (a dead part still fails at once).
    wait_s: float = 180,
    target: str | None = None,
) -> Stack:
    """Every part on ``backend``, each its own process, or all in one (``target`` "all")."""
    stack = Stack(await stack_env(databases, backend, data_dir, extra_env))
    if (target or stack_target()) == "all":
        stack.start_monolith()
    else:
        for name in ALL:
            stack.start(name)
    try:
        await stack.wait_serving(ALL, wait_s)
    except Exception:
        stack.stop_all()
        raise
    return stack


async def stack_env(
    databases: Databases, backend: str, data_dir: Path, extra_env: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a test stack: its own addresses, fresh databases and data dir."""
    env = dict(os.environ)
    for name in ALL:
        env[f"REVIEWLOOP_{name.upper()}_ADDR"] = f"127.0.0.1:{free_port()}"
    for name in SERVICES:
        env[f"REVIEWLOOP_{name.upper()}_METRICS_ADDR"] = f"127.0.0.1:{free_port()}"
    for name in (*SERVICES, GATEWAY):
        env[f"REVIEWLOOP_{name.upper()}_DB"] = await databases.url(backend, name)
    env.update(
        REVIEWLOOP_DATA_DIR=str(data_dir),
        REVIEWLOOP_ADMIN_TOKEN=ADMIN_TOKEN,
        REVIEWLOOP_RELAY_POLL_S="0.2",
        REVIEWLOOP_TRACE_SQL="1",  # test_trace follows a request down to its statements
        REVIEWLOOP_UNDO_WINDOW_S="0",  # releases go at once; the undo window's own tests open one
    )
    # Every request still counts against the rate limits (the path runs), but no test meets one; the
    # limits' own tests set small ones.
    env.update({rate_limit_env(name): "100000/minute" for name in DEFAULT_RATE_LIMITS})
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.update(extra_env or {})
    return env


def production_trust(pki: Path) -> dict[str, str]:
    """The production overlay's trust between the parts: a service key and mTLS certificates (openssl)."""
    from tests.reviewloop.test_trust import make_pki

    pki.mkdir(parents=True, exist_ok=True)
    return {"REVIEWLOOP_SERVICE_AUTH_KEY": uuid.uuid4().hex * 2, **make_pki(pki)("reviewloop")}


async def start_stack_for(
    param: tuple[str, str],
    databases: Databases,
    tmp_path_factory: pytest.TempPathFactory,
    extra_env: dict[str, str] | None = None,
) -> Stack:
    """A stack on ``param``'s (backend, trust): see ``STACK_PARAMS``."""
    backend, trust = param
    if backend == "postgres":
        _pg_server()
    tmp = tmp_path_factory.mktemp(f"stack-{backend}-{trust}")
    env = dict(extra_env or {})
    if trust == "production_trust":
        env.update(production_trust(tmp / "pki"))
    return await start_stack(databases, backend, tmp, env)


@pytest.fixture(scope="session", params=BACKENDS)
async def stack(
    request: pytest.FixtureRequest, databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """Every service and the gateway as real processes, each on its own fresh database."""
    backend = str(request.param)
    if backend == "postgres":
        _pg_server()
    running = await start_stack(databases, backend, tmp_path_factory.mktemp(f"stack-{backend}"))
    yield running
    running.stop_all()


class Api:
    """A JSON client of the gateway, with helpers for the console's set-up steps."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.http = httpx.AsyncClient(base_url=f"http://{stack.address(GATEWAY)}", timeout=30)

    def auth(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    @property
    def admin(self) -> dict[str, str]:
        return self.auth(ADMIN_TOKEN)

    async def project(self) -> dict[str, Any]:
        response = await self.http.post("/v1/admin/projects", json={"name": "test"}, headers=self.admin)
        assert response.status_code == 201, response.text
        return dict(response.json())

    async def key(self, project_id: str, actor_kind: str = "agent") -> dict[str, Any]:
        response = await self.http.post(
            "/v1/admin/api-keys",
            json={"project_id": project_id, "actor_kind": actor_kind},
            headers=self.admin,
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    async def agent(self) -> dict[str, str]:
        """Auth headers of a new agent key in a new project."""
        project = await self.project()
        return self.auth((await self.key(project["project_id"]))["api_key"])


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[Api]:
    client = Api(stack)
    yield client
    await client.http.aclose()


INTENT = {
    "summary": "Re-engage cold lead at Acme about Q3 pilot",
    "meta": {"goal": "book_meeting", "prior_touches": 2},
}


def draft(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "to": ["vp@acme.com"],
        "subject": "Q3 pilot",
        "body_text": "Let me know your thoughts.",
        "intent": INTENT,
    }
    body.update(overrides)
    return body
