"""Delivery through a real SMTP relay, end to end: an approved review leaves as the bytes reviewed."""

from __future__ import annotations

import email
import email.message
from collections.abc import AsyncIterator
from email.policy import default
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from stack.launcher import Stack, free_port

from tests.conftest import Api, Databases, draft, start_stack
from tests.e2e.helpers import events_until


class Relay:
    """An SMTP relay on loopback that keeps every message it accepts."""

    def __init__(self) -> None:
        self.received: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received.append((list(envelope.rcpt_tos), envelope.original_content))
        return "250 OK"


@pytest.fixture
async def smtp_stack(
    databases: Databases, backend: str, tmp_path: Path
) -> AsyncIterator[tuple[Stack, Relay]]:
    relay = Relay()
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    stack = await start_stack(
        databases, backend, tmp_path, {"REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}"}
    )
    yield stack, relay
    stack.stop_all()
    controller.stop()


async def test_an_approved_review_is_delivered_by_smtp_once_with_its_message_id(
    smtp_stack: tuple[Stack, Relay],
) -> None:
    stack, relay = smtp_stack
    api = Api(stack)
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"]))["api_key"])
    human = api.auth((await api.key(project["project_id"], "human"))["api_key"])
    body_text = "Can you do Thursday 2pm?\nPilot ROI attached."
    review_id = (await api.http.post("/v1/messages", json=draft(body_text=body_text), headers=agent)).json()[
        "review_id"
    ]
    opened = (
        await api.http.post(
            f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
        )
    ).json()
    decided = await api.http.post(
        f"/v1/reviews/{review_id}/decision",
        json={"action": "approve", "revision": opened["revision"], "version": opened["version"]},
        headers=human,
    )
    assert decided.status_code == 200, decided.text
    review = decided.json()
    assert review["state"] == "sent" and review["send_path"] == "human_reviewed"

    assert len(relay.received) == 1
    recipients, raw = relay.received[0]
    assert recipients == ["vp@acme.com"]
    message = email.message_from_bytes(raw, policy=default)
    assert isinstance(message, email.message.EmailMessage)
    assert message["Subject"] == "Q3 pilot"
    plain = message.get_body(preferencelist=("plain",))
    assert plain is not None and plain.get_content().replace("\r\n", "\n").rstrip("\n") == body_text
    assert message["Message-ID"]

    events = await events_until(api, agent, 1)
    await api.http.aclose()
    assert [e["reason"] for e in events] == ["sent"]
    assert events[0]["payload"]["message_id"] == review["message_id"]
