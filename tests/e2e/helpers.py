"""Polling helpers for effects that cross the outbox asynchronously."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.conftest import Api


async def events_until(
    api: Api, headers: dict[str, str], count: int, timeout_s: float = 15.0
) -> list[dict[str, Any]]:
    """The caller's un-acked events, once at least ``count`` are visible (or fail after the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await api.http.get("/v1/review-events", headers=headers)
        if response.status_code == 503 and time.monotonic() < deadline:  # a backend is restarting
            await asyncio.sleep(float(response.headers["retry-after"]))
            continue
        assert response.status_code == 200, response.text
        events: list[dict[str, Any]] = response.json()["events"]
        if len(events) >= count or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.1)
