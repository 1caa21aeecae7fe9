"""Issue 38's exact bytes on the API planes (the console's twin is tests/console/test_exact_bytes): a
review's GET carries ``message_sha256``, ``preview_review_message`` gives the exact MIME and digest of the
message an approval (or a proposed edit) delivers, ``decide_review`` names the digest (refused 409 stale,
with the digest it now has, when it differs) and a human's ``override_held`` approves a rule-held draft.
Through REST and MCP, on a real SMTP relay: the message received hashes to the digest approved, for a
text-only, an HTML and an attachment-carrying draft, edited and not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from stack.launcher import free_port

from tests.conftest import BACKENDS, Api, Databases, _pg_server, draft, start_stack
from tests.e2e.test_delivery_smtp import Relay
from tests.exact_bytes import (
    EDITED_BODY,
    HIDDEN_LINE,
    HTML,
    delivered_digest,
    each_kind_delivers_what_was_approved,
    received_by,
)
from tests.gateway.test_mcp import mcp_client, structured


@pytest.fixture(scope="module", params=BACKENDS)
async def relayed(
    request: pytest.FixtureRequest, databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Api, Relay]]:
    """One stack per backend on a real SMTP relay, shared by the module's tests (each its own project)."""
    backend = str(request.param)
    if backend == "postgres":
        _pg_server()
    relay = Relay()
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    stack = await start_stack(
        databases,
        backend,
        tmp_path_factory.mktemp(f"exact-bytes-{backend}"),
        {"REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}"},
    )
    api = Api(stack)
    yield api, relay
    await api.http.aclose()
    stack.stop_all()
    controller.stop()


async def _keys(api: Api) -> tuple[str, str]:
    project = await api.project()
    agent = (await api.key(project["project_id"]))["api_key"]
    human = (await api.key(project["project_id"], "human"))["api_key"]
    return agent, human


async def _submit(api: Api, agent: str, **overrides: Any) -> str:
    submitted = await _json(
        await api.http.post("/v1/messages", json=draft(**overrides), headers=api.auth(agent)), 202
    )
    return str(submitted["review_id"])


async def _json(response: Any, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return dict(response.json())


async def test_rest_delivers_the_message_whose_digest_was_approved(relayed: tuple[Api, Relay]) -> None:
    api, relay = relayed
    agent, human = await _keys(api)
    headers = api.auth(human)

    async def approve(rid: str, edited: bool) -> str:
        opened = await _json(
            await api.http.post(
                f"/v1/reviews/{rid}/open", json={"revision": 1, "version": 1}, headers=headers
            )
        )
        seen = await _json(await api.http.get(f"/v1/reviews/{rid}", headers=headers))
        decision: dict[str, Any] = {"action": "approve", "revision": opened["revision"]}
        digest = str(seen["message_sha256"])
        if edited:
            preview = await _json(
                await api.http.post(f"/v1/reviews/{rid}/preview", json={"body": EDITED_BODY}, headers=headers)
            )
            assert preview["message_sha256"] != digest and EDITED_BODY in preview["raw_mime"]
            assert HIDDEN_LINE not in preview.get("body_html", "")
            digest = preview["message_sha256"]
            decision |= {"action": "edit", "body": EDITED_BODY}
        else:  # the preview of the draft as it stands is the message GET named
            preview = await _json(await api.http.post(f"/v1/reviews/{rid}/preview", json={}, headers=headers))
            assert preview["message_sha256"] == digest
        decided = await api.http.post(
            f"/v1/reviews/{rid}/decision", json={**decision, "message_sha256": digest}, headers=headers
        )
        assert decided.status_code == 200, decided.text
        return digest

    approved = await each_kind_delivers_what_was_approved(api, agent, relay, approve)
    # Once sent, the review still names the digest of the message delivered.
    for rid, digest in approved.items():
        sent = await _json(await api.http.get(f"/v1/reviews/{rid}", headers=headers))
        assert sent["state"] == "sent" and sent["message_sha256"] == digest, rid


async def test_mcp_delivers_the_message_whose_digest_was_approved(relayed: tuple[Api, Relay]) -> None:
    api, relay = relayed
    agent, human = await _keys(api)
    async with mcp_client(api, api.auth(human)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        decide = tools["decide_review"].input_schema["properties"]
        assert {"message_sha256", "override_held", "body_html"} <= set(decide)
        assert {"subject", "body", "body_html"} <= set(
            tools["preview_review_message"].input_schema["properties"]
        )
        output = tools["get_review"].output_schema
        assert output is not None and "message_sha256" in output["properties"]

        async def approve(rid: str, edited: bool) -> str:
            opened = structured(
                await client.call_tool("open_review", {"review_id": rid, "revision": 1, "version": 1})
            )
            edit = {"body": EDITED_BODY} if edited else {}
            preview = structured(await client.call_tool("preview_review_message", {"review_id": rid, **edit}))
            if not edited:
                seen = structured(await client.call_tool("get_review", {"review_id": rid}))
                assert seen["message_sha256"] == preview["message_sha256"]
            result = await client.call_tool(
                "decide_review",
                {
                    "review_id": rid,
                    "action": "edit" if edited else "approve",
                    "revision": opened["revision"],
                    "message_sha256": preview["message_sha256"],
                    **edit,
                },
            )
            assert not result.is_error, result.content
            return str(preview["message_sha256"])

        await each_kind_delivers_what_was_approved(api, agent, relay, approve)


async def test_a_decision_naming_another_message_is_refused_stale(relayed: tuple[Api, Relay]) -> None:
    api, _ = relayed
    agent, human = await _keys(api)
    headers = api.auth(human)
    rid = await _submit(api, agent, body_html=HTML)
    await _json(
        await api.http.post(f"/v1/reviews/{rid}/open", json={"revision": 1, "version": 1}, headers=headers)
    )
    seen = await _json(await api.http.get(f"/v1/reviews/{rid}", headers=headers))
    # An edit named with the digest of the message as it stands is not what that edit delivers.
    refused = await api.http.post(
        f"/v1/reviews/{rid}/decision",
        json={"action": "edit", "revision": 1, "body": EDITED_BODY, "message_sha256": seen["message_sha256"]},
        headers=headers,
    )
    problem = await _json(refused, 409)
    assert problem["code"] == "stale"
    assert "is not the one you saw" in problem["detail"]
    edited = (
        await _json(
            await api.http.post(f"/v1/reviews/{rid}/preview", json={"body": EDITED_BODY}, headers=headers)
        )
    )["message_sha256"]
    assert edited[:16] in problem["detail"]  # what it is now
    # A malformed digest is the request's own 422; nothing was decided either way.
    malformed = await api.http.post(
        f"/v1/reviews/{rid}/decision",
        json={"action": "approve", "revision": 1, "message_sha256": "not-a-digest"},
        headers=headers,
    )
    assert malformed.status_code == 422, malformed.text
    now = await _json(await api.http.get(f"/v1/reviews/{rid}", headers=headers))
    assert (now["state"], now["version"]) == ("in_review", seen["version"])


async def test_a_human_overrides_a_rule_hold_by_name(relayed: tuple[Api, Relay]) -> None:
    """A rule saved from one draft's edit holds another pending draft of its reach: approve alone is
    409 born_stale; with ``override_held`` the human's approval of it as it stands is delivered."""
    api, relay = relayed
    agent, human = await _keys(api)
    headers = api.auth(human)
    project = (await api.http.get(f"/v1/reviews/{await _submit(api, agent)}", headers=headers)).json()
    created = await api.http.post(
        f"/v1/admin/projects/{project['project_id']}/categories", json={"name": "held"}, headers=api.admin
    )
    category = (await _json(created, 201))["id"]
    first = await _submit(api, agent, subject="first", to=["first@example.com"], category_id=category)
    held = await _submit(api, agent, subject="held", to=["held-by-rule@example.com"], category_id=category)
    for rid in (first, held):
        await _json(
            await api.http.post(
                f"/v1/reviews/{rid}/open", json={"revision": 1, "version": 1}, headers=headers
            )
        )
    await _json(
        await api.http.post(
            f"/v1/reviews/{first}/decision",
            json={
                "action": "edit",
                "revision": 1,
                "body": "Would Thursday at 2pm work?",
                "new_rule": {"rule_text": "Offer a time, never ask for one.", "scope": "general"},
            },
            headers=headers,
        )
    )
    deadline = time.monotonic() + 20
    while True:  # the rule's event reaches review_state through the outbox
        pacing = await _json(await api.http.get(f"/v1/categories/{category}/pacing", headers=headers))
        if pacing["stale"]:
            break
        assert time.monotonic() < deadline, pacing
        await asyncio.sleep(0.3)
    plain = await api.http.post(
        f"/v1/reviews/{held}/decision", json={"action": "approve", "revision": 1}, headers=headers
    )
    assert (plain.status_code, plain.json()["code"]) == (409, "born_stale"), plain.text
    seen = await _json(await api.http.get(f"/v1/reviews/{held}", headers=headers))
    overridden = await api.http.post(
        f"/v1/reviews/{held}/decision",
        json={
            "action": "approve",
            "revision": 1,
            "override_held": True,
            "message_sha256": seen["message_sha256"],
        },
        headers=headers,
    )
    assert overridden.status_code == 200, overridden.text
    raw = await received_by(relay, "held-by-rule@example.com")
    assert delivered_digest(raw) == seen["message_sha256"]
