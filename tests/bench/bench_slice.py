"""The foundation slice through real processes on SQLite: submit and cancel over HTTP."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from tests.conftest import Api, Databases, draft, start_stack

ROUNDS = 200


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
        finally:
            await api.http.aclose()
            stack.stop_all()
    return [
        ("slice: POST /v1/messages (sqlite)", submit, "gateway -> review_state, one client"),
        ("slice: POST /v1/reviews/{id}/cancel (sqlite)", cancel, "CAS + outbox row"),
    ]
