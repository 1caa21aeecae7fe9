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


async def auto_notify_category(api: Api, project_id: str, name: str = "renewals") -> str:
    """A category of ``project_id`` graduated to ``auto_notify`` under ``auto_send_graduated``, with a
    risk dial that lets a confident (0.9) draft auto-send and holds an unsure (0.2) one."""
    admin = api.admin
    created = await api.http.post(
        f"/v1/admin/projects/{project_id}/categories", json={"name": name}, headers=admin
    )
    assert created.status_code == 201, created.text
    category = str(created.json()["id"])
    gate = {
        "graduate_min_approvals": 0,  # a maturity gate met from the start
        "graduate_min_age_hours": 0,
        "min_confidence": 0.6,
        "first_contact_gate": False,
        "canary_rate": 0.0,
    }
    dial = await api.http.put(
        f"/v1/admin/projects/{project_id}/risk-dial", json={"account": gate}, headers=admin
    )
    assert dial.status_code == 200, dial.text
    graduated = await api.http.post(
        f"/v1/admin/categories/{category}/graduate", json={"to_state": "auto_notify"}, headers=admin
    )
    assert graduated.status_code == 200, graduated.text
    policy = await api.http.put(
        f"/v1/admin/projects/{project_id}/review-policy",
        json={"policy": "auto_send_graduated"},
        headers=admin,
    )
    assert policy.status_code == 200, policy.text
    return category
