"""One tenant cannot hold the others hostage (issue 36, "Streams and rates"), through real gateways: open
event streams are capped per key (the idlest is closed) and per project (429 rate_limited), and the agent
plane's submits, waits, acks and rule writes are rate limited per key and per project, with the windows
shared by every gateway replica through the gateway's store."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from stack.launcher import Stack, free_port
from stack.topology import GATEWAY

from tests.conftest import BACKENDS, Api, Databases, _pg_server, draft, start_stack

LIMITS_ENV = {
    "REVIEWLOOP_STREAMS_PER_KEY": "2",
    "REVIEWLOOP_STREAMS_PER_PROJECT": "3",
    "REVIEWLOOP_RATE_LIMIT_SUBMIT_PER_KEY": "3/minute",
    "REVIEWLOOP_RATE_LIMIT_SUBMIT_PER_PROJECT": "5/minute",
    "REVIEWLOOP_RATE_LIMIT_WAIT_PER_KEY": "2/minute",
    "REVIEWLOOP_RATE_LIMIT_ACK_PER_KEY": "2/minute",
    "REVIEWLOOP_RATE_LIMIT_RULE_WRITE_PER_KEY": "2/minute",
}


@pytest.fixture(scope="module", params=BACKENDS)
async def limited(
    request: pytest.FixtureRequest, databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    backend = str(request.param)
    if backend == "postgres":
        _pg_server()
    running = await start_stack(databases, backend, tmp_path_factory.mktemp(f"limits-{backend}"), LIMITS_ENV)
    yield running
    running.stop_all()


@pytest.fixture
async def api(limited: Stack) -> AsyncIterator[Api]:
    client = Api(limited)
    yield client
    await client.http.aclose()


async def project_keys(api: Api, count: int) -> list[dict[str, str]]:
    project = await api.project()
    return [api.auth((await api.key(project["project_id"]))["api_key"]) for _ in range(count)]


def assert_rate_limited(response: httpx.Response, setting: str) -> None:
    assert response.status_code == 429, response.text
    problem = response.json()
    assert problem["code"] == "rate_limited" and setting in problem["detail"], problem
    assert response.headers["content-type"].startswith("application/problem+json")
    assert 1 <= int(response.headers["retry-after"]) <= 60


class Streams:
    """Open event streams, each read by a task until the server ends it."""

    def __init__(self, api: Api, stack: AsyncExitStack) -> None:
        self.api, self.stack = api, stack

    async def open(self, headers: dict[str, str]) -> tuple[httpx.Response, asyncio.Task[Any]]:
        response = await self.stack.enter_async_context(
            self.api.http.stream("GET", "/v1/review-events/stream", headers=headers)
        )
        if response.status_code != 200:
            await response.aread()
            return response, asyncio.create_task(asyncio.sleep(0))
        lines = response.aiter_lines()
        assert await anext(lines) in ("retry: 1000", ": connected")  # the stream is served
        return response, asyncio.create_task(self._drain(lines))

    @staticmethod
    async def _drain(lines: AsyncIterator[str]) -> None:
        async for _ in lines:
            pass


async def test_a_keys_new_stream_past_its_cap_closes_its_idlest_and_a_projects_is_refused_429(
    api: Api,
) -> None:
    alice, bob = await project_keys(api, 2)
    async with AsyncExitStack() as stack:
        streams = Streams(api, stack)
        (_, first), (_, second) = [await streams.open(alice) for _ in range(2)]
        third, _ = await streams.open(alice)  # past alice's cap of 2: her idlest stream (the first) closes
        assert third.status_code == 200
        await asyncio.wait_for(first, 10)
        assert not second.done()
        bobs, _ = await streams.open(bob)  # the project's third open stream: at its cap
        assert bobs.status_code == 200
        refused, _ = await streams.open(bob)  # a fourth: bob may not close alice's streams
        assert_rate_limited(refused, "REVIEWLOOP_STREAMS_PER_PROJECT")
        assert not second.done()


async def test_submits_are_limited_per_key_and_per_project(api: Api) -> None:
    alice, bob = await project_keys(api, 2)
    for _ in range(3):
        sent = await api.http.post("/v1/messages", json=draft(), headers=alice)
        assert sent.status_code == 202, sent.text
    refused = await api.http.post("/v1/messages", json=draft(), headers=alice)
    assert_rate_limited(refused, "REVIEWLOOP_RATE_LIMIT_SUBMIT_PER_KEY")
    # The project has spent 4 of its 5 (the refused submit counted too): bob gets one, then the
    # project's limit refuses him though his own key is fresh.
    assert (await api.http.post("/v1/messages", json=draft(), headers=bob)).status_code == 202
    refused = await api.http.post("/v1/messages", json=draft(), headers=bob)
    assert_rate_limited(refused, "REVIEWLOOP_RATE_LIMIT_SUBMIT_PER_PROJECT")
    # Another project is untouched.
    (carol,) = await project_keys(api, 1)
    assert (await api.http.post("/v1/messages", json=draft(), headers=carol)).status_code == 202


async def test_waits_acks_and_rule_writes_are_limited_per_key(api: Api) -> None:
    (agent,) = await project_keys(api, 1)
    rules = itertools.count()
    calls = {
        "REVIEWLOOP_RATE_LIMIT_WAIT_PER_KEY": lambda: api.http.get(
            "/v1/review-events/wait", params={"timeout_s": 1}, headers=agent
        ),
        "REVIEWLOOP_RATE_LIMIT_ACK_PER_KEY": lambda: api.http.post(
            "/v1/review-events/ack", json={"acks": []}, headers=agent
        ),
        "REVIEWLOOP_RATE_LIMIT_RULE_WRITE_PER_KEY": lambda: api.http.post(
            "/v1/rules", json={"rule_text": f"Be brief, {next(rules)}.", "scope": "general"}, headers=agent
        ),
    }
    for setting, call in calls.items():
        for _ in range(2):
            answered = await call()
            assert answered.status_code in (200, 201), answered.text
        assert_rate_limited(await call(), setting)
    # Reads are not limited.
    assert (await api.http.get("/v1/review-events", headers=agent)).status_code == 200


async def test_the_windows_are_shared_by_every_gateway_replica(api: Api, limited: Stack) -> None:
    """A second gateway process on the same store counts the same window (no per-process counters)."""
    second = Stack({**limited.env, "REVIEWLOOP_GATEWAY_ADDR": f"127.0.0.1:{free_port()}"})
    second.start(GATEWAY)
    try:
        await second.wait_serving([GATEWAY])
        (agent,) = await project_keys(api, 1)
        for _ in range(3):
            assert (await api.http.post("/v1/messages", json=draft(), headers=agent)).status_code == 202
        async with httpx.AsyncClient(base_url=f"http://{second.address(GATEWAY)}", timeout=30) as other:
            refused = await other.post("/v1/messages", json=draft(), headers=agent)
        assert_rate_limited(refused, "REVIEWLOOP_RATE_LIMIT_SUBMIT_PER_KEY")
    finally:
        second.stop_all()
