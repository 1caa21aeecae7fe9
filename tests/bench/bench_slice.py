"""The foundation slice through real processes on SQLite: one client's latency per verb, then the
gateway's throughput with 8 concurrent connections reading a review (gateway -> review_state -> JSON)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from tests.conftest import Api, Databases, draft, start_stack

ROUNDS = 200
CONNECTIONS = 8
LOAD_SECONDS = 5.0


async def _load(api: Api, path: str, headers: dict[str, str]) -> tuple[list[float], int]:
    """Each of CONNECTIONS workers loops on ``path`` for LOAD_SECONDS; returns latencies and count."""
    samples: list[float] = []
    deadline = time.perf_counter() + LOAD_SECONDS

    async def worker() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            response = await api.http.get(path, headers=headers)
            assert response.status_code == 200, response.text
            samples.append(time.perf_counter() - started)

    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    return samples, len(samples)


async def run() -> list[tuple[str, list[float], str]]:
    with tempfile.TemporaryDirectory() as tmp:
        stack = await start_stack(Databases(Path(tmp)), "sqlite", Path(tmp))
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
            loaded, count = await _load(api, f"/v1/reviews/{review_id}", agent)
        finally:
            await api.http.aclose()
            stack.stop_all()
    return [
        ("slice: POST /v1/messages (sqlite)", submit, "gateway -> review_state, one client"),
        ("slice: POST /v1/reviews/{id}/cancel (sqlite)", cancel, "CAS + outbox row, one client"),
        (
            f"slice: GET /v1/reviews/{{id}} x{CONNECTIONS} connections",
            loaded,
            f"{count / LOAD_SECONDS:.0f} requests/s; the load generator shares the two cores",
        ),
    ]
