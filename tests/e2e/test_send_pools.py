"""The shared-pool auto-send governor through the gateway (issue 35, spec 000's prerequisite before
external users): releases no human reviewed (direct and graduated auto-sends) from one sending domain
share a deployment-wide daily budget across orgs; over it a direct send is ``403 quota_exceeded`` with
nothing sent or queued and an auto-send is held for a human (``held:pool_budget``); a send the relay
refused gives its unit back; the operator reads the pools (read-only) at ``/v1/admin/send-pools``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from stack.launcher import Stack, free_port

from tests.conftest import Api, Databases, draft, start_stack
from tests.e2e.helpers import auto_notify_category

SHARED, REFUNDS = "shared-pool.example", "refund-pool.example"
BOUNCE = "nobody@bounce.example"


class Relay:
    """An SMTP relay on loopback that refuses ``BOUNCE`` at RCPT (before DATA) and keeps the rest."""

    def __init__(self) -> None:
        self.received: list[list[str]] = []

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        if address == BOUNCE:
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received.append(list(envelope.rcpt_tos))
        return "250 OK"


@pytest.fixture
async def pooled(databases: Databases, backend: str, tmp_path: Path) -> AsyncIterator[tuple[Api, Relay]]:
    relay = Relay()
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    extra = {
        "REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}",
        "REVIEWLOOP_AUTO_SEND_POOL_BUDGETS": f"{SHARED}=3 {REFUNDS}=1",
    }
    stack: Stack = await start_stack(databases, backend, tmp_path, extra)
    api = Api(stack)
    yield api, relay
    await api.http.aclose()
    stack.stop_all()
    controller.stop()


async def _direct_agent(api: Api) -> tuple[str, str, dict[str, str]]:
    """A new org's project on ``allow_direct`` and its agent key."""
    project = await api.project()
    policy = await api.http.put(
        f"/v1/admin/projects/{project['project_id']}/review-policy",
        json={"policy": "allow_direct"},
        headers=api.admin,
    )
    assert policy.status_code == 200, policy.text
    return (
        project["org_id"],
        project["project_id"],
        api.auth((await api.key(project["project_id"]))["api_key"]),
    )


def _direct(inbox: str, **fields: Any) -> dict[str, Any]:
    body = draft(inbox=inbox, **fields)
    del body["intent"]  # released immediately under allow_direct
    return body


async def _pool(api: Api, name: str) -> dict[str, Any]:
    listed = await api.http.get("/v1/admin/send-pools", headers=api.admin)
    assert listed.status_code == 200, listed.text
    return next((p for p in listed.json()["pools"] if p["pool"] == name), {})


async def test_two_orgs_sharing_a_domain_stop_at_the_pool_budget_and_a_refused_send_refunds(
    pooled: tuple[Api, Relay],
) -> None:
    api, relay = pooled
    assert relay.received == []
    org_a, _, agent_a = await _direct_agent(api)
    org_b, project_b, agent_b = await _direct_agent(api)
    assert org_a != org_b
    sender = f"sales@{SHARED}"
    for agent in (agent_a, agent_b, agent_a):
        sent = await api.http.post("/v1/messages", json=_direct(sender), headers=agent)
        assert sent.status_code == 202 and sent.json()["kind"] == "sent", sent.text
    # The fourth release from the domain, by either org, is over the deployment's budget.
    over = await api.http.post("/v1/messages", json=_direct(f"Support@{SHARED.upper()}"), headers=agent_b)
    problem = over.json()
    assert (over.status_code, problem["code"]) == (403, "quota_exceeded"), over.text
    assert "nothing was sent and nothing was queued" in problem["detail"]
    facts = {e["field"]: e["detail"] for e in problem["errors"]}
    assert (facts["send_pool"], facts["send_pool_budget"]) == (SHARED, "3/3"), problem["errors"]
    listed = await api.http.get("/v1/reviews", headers=agent_b)
    assert len(listed.json()["items"]) == 1  # only its one release: nothing queued for the refused one
    # Another domain is another pool; a human-reviewed send never spends the pool.
    other = await api.http.post("/v1/messages", json=_direct("sales@elsewhere.example"), headers=agent_b)
    assert other.status_code == 202 and other.json()["kind"] == "sent", other.text
    # A graduated auto-send in a third org is held for a human, as every gate holds.
    project_c = (await api.project())["project_id"]
    agent_c = api.auth((await api.key(project_c))["api_key"])
    category = await auto_notify_category(api, project_c)
    held = await api.http.post(
        "/v1/messages", json=draft(inbox=sender, category_id=category, confidence=0.9), headers=agent_c
    )
    assert held.status_code == 202, held.text
    review = held.json()["review"]
    assert (review["state"], review["gate_outcome"]) == ("needs_review", "held:pool_budget"), review
    pool = await _pool(api, SHARED)
    assert (pool["used"], pool["budget_per_day"], pool["remaining"]) == (3, 3, 0), pool
    # Read-only and the deployment's: a project admin key does not read other orgs' pools.
    admin_b = api.auth((await api.key(project_b, "admin"))["api_key"])
    refused = await api.http.get("/v1/admin/send-pools", headers=admin_b)
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden_scope"), refused.text

    # A send the relay refuses at RCPT never happened: its unit comes back through the outbox.
    bounced = await api.http.post(
        "/v1/messages", json=_direct(f"ops@{REFUNDS}", to=[BOUNCE]), headers=agent_a
    )
    assert bounced.status_code == 202, bounced.text
    bounced_id = bounced.json()["review"]["id"]
    deadline = time.monotonic() + 30
    while True:
        pool = await _pool(api, REFUNDS)
        if pool.get("refunded") == 1 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert (pool["used"], pool["refunded"]) == (0, 1), pool
    failed = (await api.http.get(f"/v1/reviews/{bounced_id}", headers=agent_a)).json()
    assert failed["state"] == "failed", failed
    again = await api.http.post("/v1/messages", json=_direct(f"ops@{REFUNDS}"), headers=agent_b)
    assert again.status_code == 202 and again.json()["kind"] == "sent", again.text
    full = await api.http.post("/v1/messages", json=_direct(f"ops@{REFUNDS}"), headers=agent_a)
    assert (full.status_code, full.json()["code"]) == (403, "quota_exceeded"), full.text
