"""Issue 38's undo window through the gateway, on a real SMTP relay (aiosmtpd): a human's approval
undone inside the window leaves the draft pending and sends nothing and nudges nothing; one left alone is
delivered once, with one terminal nudge, after the window; an undo after that is a 409
``already_released``; and a review_state restart inside the window still delivers after it, once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from stack.launcher import Stack, free_port

from tests.conftest import Api, Databases, draft, start_stack
from tests.e2e.helpers import events_until
from tests.e2e.test_delivery_smtp import Relay

WINDOW_S = 2.0


@pytest.fixture
async def undo_stack(
    databases: Databases, backend: str, tmp_path: Path
) -> AsyncIterator[tuple[Stack, Relay]]:
    relay = Relay()
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    extra = {
        "REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}",
        "REVIEWLOOP_UNDO_WINDOW_S": str(WINDOW_S),
        "REVIEWLOOP_RECONCILE_SWEEP_S": "0.3",
    }
    stack = await start_stack(databases, backend, tmp_path, extra)
    yield stack, relay
    stack.stop_all()
    controller.stop()


async def _opened(api: Api) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"]))["api_key"])
    human = api.auth((await api.key(project["project_id"], "human"))["api_key"])
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200, opened.text
    return agent, human, opened.json()


async def _approve(api: Api, human: dict[str, str], review: dict[str, Any]) -> dict[str, Any]:
    decided = await api.http.post(
        f"/v1/reviews/{review['id']}/decision",
        json={"action": "approve", "revision": review["revision"], "version": review["version"]},
        headers=human,
    )
    assert decided.status_code == 200, decided.text
    approved: dict[str, Any] = decided.json()
    assert approved["state"] == "approved" and approved["undo_until"]
    return approved


async def _until_sent(
    api: Api, human: dict[str, str], review_id: str, timeout_s: float = 20.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        response = await api.http.get(f"/v1/reviews/{review_id}", headers=human)
        if response.status_code == 200 and response.json()["state"] == "sent":
            return dict(response.json())
        assert time.monotonic() < deadline, response.text
        await asyncio.sleep(0.1)


async def test_an_approval_undone_in_the_window_sends_nothing_and_one_left_alone_sends_once(
    undo_stack: tuple[Stack, Relay],
) -> None:
    stack, relay = undo_stack
    api = Api(stack)
    agent, human, opened = await _opened(api)
    review_id = opened["id"]
    approved = await _approve(api, human, opened)
    window = datetime.fromisoformat(approved["undo_until"]) - datetime.fromisoformat(approved["decided_at"])
    assert abs(window.total_seconds() - WINDOW_S) < 0.01
    undone = await api.http.post(
        f"/v1/reviews/{review_id}/undo",
        json={"revision": approved["revision"], "version": approved["version"]},
        headers=human,
    )
    assert undone.status_code == 200, undone.text
    back = undone.json()
    assert (back["state"], back["revision"], back["version"]) == ("in_review", 1, approved["version"] + 1)
    assert "undo_until" not in back and "send_path" not in back
    await asyncio.sleep(WINDOW_S + 1.0)  # past the window and a few sweeps
    read = (await api.http.get(f"/v1/reviews/{review_id}", headers=human)).json()
    assert read["state"] == "in_review" and "delivery" not in read
    assert read["turns"][-1]["turn_type"] == "undo" and read["turns"][-1]["actor_kind"] == "human"
    assert relay.received == []
    assert await events_until(api, agent, 1, timeout_s=1.0) == []  # no terminal nudge, nor any other

    # Approved again and left alone: it goes out once the window closes, once, with one `sent` nudge.
    approved = await _approve(api, human, read)
    assert relay.received == []
    sent = await _until_sent(api, human, review_id)
    assert sent["sent_at"] >= approved["undo_until"]
    events = await events_until(api, agent, 1)
    assert [e["reason"] for e in events] == ["sent"]
    late = await api.http.post(
        f"/v1/reviews/{review_id}/undo",
        json={"revision": approved["revision"], "version": approved["version"]},
        headers=human,
    )
    assert late.status_code == 409, late.text
    problem = late.json()
    assert problem["code"] == "wrong_state" and "already" in problem["detail"]
    await asyncio.sleep(1.0)
    assert len(relay.received) == 1
    assert [e["reason"] for e in await events_until(api, agent, 2, timeout_s=1.0)] == ["sent"]


@pytest.mark.microservices_only("restarts review_state alone inside the window")
async def test_a_restart_inside_the_window_still_delivers_after_it_once(
    undo_stack: tuple[Stack, Relay],
) -> None:
    stack, relay = undo_stack
    api = Api(stack)
    agent, human, opened = await _opened(api)
    approved = await _approve(api, human, opened)
    stack.stop("review_state")  # dies inside the window, its timer with it
    assert relay.received == []
    stack.start("review_state")
    await stack.wait_serving(["review_state"], 120)
    sent = await _until_sent(api, human, opened["id"], timeout_s=60)
    assert sent["sent_at"] >= approved["undo_until"]
    await asyncio.sleep(1.0)  # later sweeps send nothing again
    assert len(relay.received) == 1
    assert [e["reason"] for e in await events_until(api, agent, 1)] == ["sent"]
