"""Escalation goes somewhere, through the gateway against real processes (issue 38): a human escalates a
draft to a person of the project with a deadline; the review says so, ``escalated_to=me`` finds it for
that person's key and not another's, the endpoint that asked for ``escalated`` gets the signed event,
and the person's address gets the mail through the configured SMTP relay (an aiosmtpd sink)."""

from __future__ import annotations

import asyncio
import email
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.policy import default
from pathlib import Path

import orjson
import pytest
from aiosmtpd.controller import Controller
from reviewloop.client import verify_webhook
from stack.launcher import Stack, free_port

from tests.conftest import Api, Databases, draft, start_stack
from tests.e2e.test_delivery_smtp import Relay
from tests.receiver import receiving

ENV = {
    "REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
    "REVIEWLOOP_WEBHOOK_KEY": "e2e-webhook-key",
    "REVIEWLOOP_WEBHOOK_BACKOFF_S": "0.05",
}


@pytest.fixture
async def stack_and_relay(
    databases: Databases, backend: str, tmp_path: Path
) -> AsyncIterator[tuple[Stack, Relay]]:
    relay = Relay()
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    stack = await start_stack(
        databases, backend, tmp_path, {**ENV, "REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}"}
    )
    yield stack, relay
    stack.stop_all()
    controller.stop()


async def _key(
    api: Api, project_id: str, kind: str, name: str, email_address: str | None = None
) -> dict[str, str]:
    body = {"project_id": project_id, "actor_kind": kind, "name": name}
    if email_address:
        body["email"] = email_address
    issued = await api.http.post("/v1/admin/api-keys", json=body, headers=api.admin)
    assert issued.status_code == 201, issued.text
    return issued.json()


async def test_an_escalation_to_a_person_with_a_deadline_reaches_them(
    stack_and_relay: tuple[Stack, Relay],
) -> None:
    stack, relay = stack_and_relay
    api = Api(stack)
    pid = (await api.project())["project_id"]
    agent = api.auth((await _key(api, pid, "agent", "drafter"))["api_key"])
    alice = api.auth((await _key(api, pid, "human", "alice"))["api_key"])
    bob_key = await _key(api, pid, "human", "bob", "bob@example.com")
    bob = api.auth(bob_key["api_key"])
    carol = api.auth((await _key(api, pid, "human", "carol"))["api_key"])
    async with receiving() as hook, receiving() as agents:
        asked = await api.http.post(
            f"/v1/admin/projects/{pid}/webhooks",
            json={"url": hook.url, "reasons": ["escalated"]},
            headers=api.admin,
        )
        assert asked.status_code == 201, asked.text
        every = await api.http.post(
            f"/v1/admin/projects/{pid}/webhooks", json={"url": agents.url}, headers=api.admin
        )
        assert every.status_code == 201, every.text
        submitted = await api.http.post("/v1/messages", json=draft(subject="pricing"), headers=agent)
        assert submitted.status_code == 202, submitted.text
        rid = submitted.json()["review_id"]
        opened = (
            await api.http.post(f"/v1/reviews/{rid}/open", json={"revision": 1, "version": 1}, headers=alice)
        ).json()
        deadline = (datetime.now(UTC) + timedelta(hours=4)).replace(microsecond=0)
        escalated = await api.http.post(
            f"/v1/reviews/{rid}/decision",
            json={
                "action": "escalate",
                "revision": opened["revision"],
                "version": opened["version"],
                "feedback": "pricing needs sign-off",
                "escalate_to": {"kind": "person", "id": bob_key["key_id"]},
                "escalation_deadline": deadline.isoformat(),
            },
            headers=alice,
        )
        assert escalated.status_code == 200, escalated.text

        got = (await api.http.get(f"/v1/reviews/{rid}", headers=alice)).json()
        assert got["escalation"]["escalated_to"] == {"kind": "person", "id": bob_key["key_id"], "name": "bob"}
        assert datetime.fromisoformat(got["escalation"]["deadline"].replace("Z", "+00:00")) == deadline
        assert got["escalation"]["overdue"] is False

        mine = (await api.http.get("/v1/reviews", params={"escalated_to": "me"}, headers=bob)).json()
        assert [r["id"] for r in mine["items"]] == [rid]
        others = (await api.http.get("/v1/reviews", params={"escalated_to": "me"}, headers=carol)).json()
        assert others["items"] == []
        overdue = (await api.http.get("/v1/reviews", params={"overdue": "true"}, headers=bob)).json()
        assert overdue["items"] == []

        await hook.until(1)
        await agents.until(1)  # the agent's redraft_requested: an endpoint of every nudge gets no escalated
        assert [orjson.loads(b)["data"]["reason"] for _, b in agents.received] == ["redraft_requested"]
        headers, raw = hook.received[0]
        verify_webhook(asked.json()["secret"], headers, raw)
        event = orjson.loads(raw)
        assert event["type"] == "escalated"
        data = event["data"]
        assert (data["review_id"], data["escalated_to"]["id"], data["escalated_to"]["name"]) == (
            rid,
            bob_key["key_id"],
            "bob",
        )
        assert datetime.fromisoformat(data["deadline"].replace("Z", "+00:00")) == deadline
        assert data["feedback"] == "pricing needs sign-off"

    async with asyncio.timeout(20):
        while not relay.received:  # noqa: ASYNC110 - the relay sink exposes no event
            await asyncio.sleep(0.05)
    [(recipients, raw_mail)] = relay.received
    assert recipients == ["bob@example.com"]
    mail = email.message_from_bytes(raw_mail, policy=default)
    text = mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert mail["Subject"].startswith("Escalated to you")
    assert "by alice" in text and f"/console/reviews/{rid}" in text and "pricing needs sign-off" in text
    await api.http.aclose()


async def test_a_target_outside_the_project_or_a_past_deadline_is_refused(
    stack_and_relay: tuple[Stack, Relay],
) -> None:
    stack, relay = stack_and_relay
    api = Api(stack)
    pid = (await api.project())["project_id"]
    other = (await api.project())["project_id"]
    agent = api.auth((await _key(api, pid, "agent", "drafter"))["api_key"])
    alice = api.auth((await _key(api, pid, "human", "alice"))["api_key"])
    stranger = await _key(api, other, "human", "stranger", "s@example.com")
    rid = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    opened = (
        await api.http.post(f"/v1/reviews/{rid}/open", json={"revision": 1, "version": 1}, headers=alice)
    ).json()
    base = {"action": "escalate", "revision": opened["revision"], "version": opened["version"]}
    refused = await api.http.post(
        f"/v1/reviews/{rid}/decision",
        json={**base, "escalate_to": {"kind": "person", "id": stranger["key_id"]}},
        headers=alice,
    )
    assert refused.status_code == 422 and "/escalate_to/id" in refused.text, refused.text
    late = await api.http.post(
        f"/v1/reviews/{rid}/decision",
        json={
            **base,
            "escalate_to": {"kind": "role", "id": "admin"},
            "escalation_deadline": "2020-01-01T00:00:00Z",
        },
        headers=alice,
    )
    assert late.status_code == 422 and "/escalation_deadline" in late.text, late.text
    assert (await api.http.get(f"/v1/reviews/{rid}", headers=alice)).json()["version"] == opened["version"]
    assert relay.received == []
    await api.http.aclose()
