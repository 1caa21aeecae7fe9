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
from reviewloop.client import AsyncReviewloop
from stack.launcher import Stack, free_port
from stack.topology import GATEWAY

from tests.conftest import ADMIN_TOKEN, Api, Databases, draft, start_stack
from tests.e2e.helpers import events_until
from tests.imap_server import ImapServer


class Relay:
    """An SMTP relay on loopback that keeps every message it accepts; with ``drop_after_data`` it takes
    the message and drops the connection before its reply (the outcome a client cannot know)."""

    def __init__(self) -> None:
        self.received: list[tuple[list[str], bytes]] = []
        self.drop_after_data = False

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received.append((list(envelope.rcpt_tos), envelope.original_content))
        if self.drop_after_data:
            server.transport.close()
        return "250 OK"

    def raw(self) -> list[bytes]:
        return [raw for _, raw in self.received]


@pytest.fixture
async def smtp_stack(
    databases: Databases, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Stack, Relay]]:
    """The stack on a real relay; a test marked ``imap`` also gets the relay's Sent folder over IMAP."""
    relay = Relay()
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    extra = {"REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}", "REVIEWLOOP_RECONCILE_SWEEP_S": "0.2"}
    imap = ImapServer(relay.raw) if getattr(request, "param", "") == "imap" else None
    if imap is not None:
        imap.start()
        extra["REVIEWLOOP_IMAP_URL"] = imap.url
    stack = await start_stack(databases, backend, tmp_path, extra)
    yield stack, relay
    stack.stop_all()
    controller.stop()
    if imap is not None:
        imap.stop()


async def _approved(api: Api, relay: Relay) -> tuple[str, dict[str, str], dict[str, str], Any]:
    """A project, its agent and human keys, and a review the human approves through the gateway."""
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"]))["api_key"])
    human = api.auth((await api.key(project["project_id"], "human"))["api_key"])
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
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
    return project["project_id"], agent, human, decided


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


async def test_a_lost_relay_answer_parks_the_review_shows_it_and_the_operator_resolves_it(
    smtp_stack: tuple[Stack, Relay],
) -> None:
    stack, relay = smtp_stack
    relay.drop_after_data = True
    api = Api(stack)
    project_id, agent, _, decided = await _approved(api, relay)
    assert decided.status_code == 200, decided.text
    review = decided.json()
    assert review["state"] == "approved" and len(relay.received) == 1
    read = (await api.http.get(f"/v1/reviews/{review['id']}", headers=agent)).json()
    delivery = read["delivery"]
    assert delivery["status"] == "send_needs_reconciliation" and delivery["tries"] == 1
    assert delivery["parked_at"] and delivery["age_s"] >= 0
    cancel = await api.http.post(
        f"/v1/reviews/{review['id']}/cancel", json={"parent_revision": read["revision"]}, headers=agent
    )
    assert cancel.status_code == 409 and cancel.json()["code"] == "send_needs_reconciliation"

    route = f"/v1/admin/projects/{project_id}/reviews/{review['id']}/delivery-resolution"
    refused = await api.http.post(route, json={"outcome": "delivered", "reason": "x"}, headers=agent)
    assert refused.status_code == 403, refused.text
    async with AsyncReviewloop(f"http://{stack.address(GATEWAY)}", ADMIN_TOKEN) as console:
        resolved = await console.resolve_delivery(
            project_id, review["id"], outcome="delivered", reason="relay log: 250 queued as 4F2A"
        )
    assert resolved.state == "sent" and resolved.delivery is not None
    assert (resolved.delivery.status, resolved.delivery.resolution) == (
        "delivered",
        "bootstrap: relay log: 250 queued as 4F2A",  # who: the bootstrap token
    )
    again = await api.http.post(route, json={"outcome": "failed", "reason": "oops"}, headers=api.admin)
    assert again.status_code == 409 and again.json()["code"] == "wrong_state"
    events = await events_until(api, agent, 1)
    await api.http.aclose()
    assert [e["reason"] for e in events] == ["sent"] and len(relay.received) == 1


@pytest.mark.parametrize("smtp_stack", ["imap"], indirect=True)
async def test_a_lost_relay_answer_is_recovered_from_the_sent_folder_over_imap(
    smtp_stack: tuple[Stack, Relay],
) -> None:
    stack, relay = smtp_stack
    relay.drop_after_data = True
    api = Api(stack)
    _, agent, _, decided = await _approved(api, relay)
    assert decided.status_code == 200, decided.text
    events = await events_until(api, agent, 1)  # the sweep finds the Message-ID in Sent
    read = (await api.http.get(f"/v1/reviews/{decided.json()['id']}", headers=agent)).json()
    await api.http.aclose()
    assert [e["reason"] for e in events] == ["sent"]
    assert read["state"] == "sent" and read["delivery"]["status"] == "delivered"
    assert len(relay.received) == 1
