"""The foundation slice through real processes: one client's latency per verb, then the
gateway's throughput with 8 concurrent connections reading a review (gateway -> review_state -> JSON)
and submitting drafts (every write queues on the store's single writer)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from tests.conftest import PG_ENV, Api, Databases, draft, start_stack

ROUNDS = 200
CONNECTIONS = 8
LOAD_SECONDS = 5.0


async def _load(send: Callable[[], Awaitable[httpx.Response]], expected: int) -> tuple[list[float], int]:
    """Each of CONNECTIONS workers loops on ``send`` for LOAD_SECONDS; returns latencies and count."""
    samples: list[float] = []
    deadline = time.perf_counter() + LOAD_SECONDS

    async def worker() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            response = await send()
            assert response.status_code == expected, response.text
            samples.append(time.perf_counter() - started)

    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    return samples, len(samples)


async def _slice(backend: str) -> list[tuple[str, list[float], str]]:
    with tempfile.TemporaryDirectory() as tmp:
        databases = Databases(Path(tmp))
        stack = await start_stack(databases, backend, Path(tmp))
        api = Api(stack)
        try:
            agent = await api.agent()
            submit, cancel = [], []
            for _ in range(ROUNDS):
                started = time.perf_counter()
                review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()[
                    "review_id"
                ]
                submit.append(time.perf_counter() - started)
                started = time.perf_counter()
                await api.http.post(
                    f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
                )
                cancel.append(time.perf_counter() - started)
            loaded, count = await _load(lambda: api.http.get(f"/v1/reviews/{review_id}", headers=agent), 200)
            written, written_count = await _load(
                lambda: api.http.post("/v1/messages", json=draft(), headers=agent), 202
            )
        finally:
            await api.http.aclose()
            stack.stop_all()
            await databases.drop_all()
    return [
        (f"slice: POST /v1/messages ({backend})", submit, "gateway -> review_state, one client"),
        (f"slice: POST /v1/reviews/{{id}}/cancel ({backend})", cancel, "CAS + outbox row, one client"),
        (
            f"slice: GET /v1/reviews/{{id}} x{CONNECTIONS} ({backend})",
            loaded,
            f"{count / LOAD_SECONDS:.0f} requests/s; the load generator shares the two cores",
        ),
        (
            f"slice: POST /v1/messages x{CONNECTIONS} ({backend})",
            written,
            f"{written_count / LOAD_SECONDS:.0f} requests/s",
        ),
    ]


async def run() -> list[tuple[str, list[float], str]]:
    """SQLite always; PostgreSQL too when REVIEWLOOP_TEST_POSTGRES names a server."""
    rows = await _slice("sqlite")
    if os.environ.get(PG_ENV):
        rows += await _slice("postgres")
    return rows
