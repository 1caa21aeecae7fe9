"""The MCP surface at /mcp, through the mcp SDK's own client over streamable HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from reviewloop.contract import CONTRACT_VERSION
from stack.topology import GATEWAY

from tests.conftest import Api, draft

AGENT_VERBS = {"send_email", "get_review", "list_reviews", "cancel_review", "list_review_events"}


@asynccontextmanager
async def mcp_client(api: Api, headers: dict[str, str]) -> AsyncIterator[Client]:
    url = f"http://{api.stack.address(GATEWAY)}/mcp"
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def structured(result: Any) -> dict[str, Any]:
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content
    return dict(result.structured_content)


async def test_tools_are_the_routes_named_by_the_spec_verbs(api: Api) -> None:
    agent = await api.agent()
    async with mcp_client(api, agent) as client:
        assert client.server_info is not None
        assert client.server_info.version == CONTRACT_VERSION
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) >= AGENT_VERBS
    assert not any(name in tools for name in ("create_project", "issue_api_key", "revoke_api_key"))
    send = tools["send_email"].input_schema
    assert {"to", "subject", "text"} <= set(send["required"])
    assert {"idempotency_key", "client_id"} <= set(send["properties"])
    assert {"review_id", "id"} <= set(tools["get_review"].input_schema["properties"])
    assert tools["list_review_events"].annotations is not None
    assert tools["list_review_events"].annotations.read_only_hint is True


async def test_the_catalog_names_arguments_schemas_and_annotations(api: Api) -> None:
    """The skill catalog's tool names and arguments (``id``, ``client_id``) work; every tool answering an
    object publishes its outputSchema; sends, cancels and acks are marked idempotent."""
    agent = await api.agent()
    async with mcp_client(api, agent) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {
            "ack_review_event",
            "propose_category",
            "reply_email",
            "get_review_turns",
        } <= set(tools)
        for name in ("send_email", "submit_revision", "cancel_review", "ack_review_event", "restamp_review"):
            annotations = tools[name].annotations
            assert annotations is not None and annotations.idempotent_hint is True, name
            assert annotations.read_only_hint is False, name
        assert tools["get_review"].output_schema is not None
        assert "proposed_subject" in tools["get_review"].output_schema["properties"]

        first = structured(await client.call_tool("send_email", {**draft(), "client_id": "cat-1"}))
        again = structured(await client.call_tool("send_email", {**draft(), "client_id": "cat-1"}))
        assert first["kind"] == "queued_for_review" and again["review_id"] == first["review_id"]
        review = structured(await client.call_tool("get_review", {"id": first["review_id"]}))
        assert review["intent_summary"] == draft()["intent"]["summary"]
        turns = structured(await client.call_tool("get_review_turns", {"id": first["review_id"]}))
        assert turns["total"] == len(turns["items"])
        cancelled = structured(
            await client.call_tool("cancel_review", {"id": first["review_id"], "client_id": "c"})
        )
        assert cancelled["state"] == "cancelled"


# What each plane must and must not see (DESIGN.md's planes; docs/budget.md).
PLANES: dict[str, tuple[set[str], set[str]]] = {
    "agent": (
        {"send_email", "reply_email", "submit_revision", "cancel_review", "ack_review_event", "get_rules"},
        {"decide_review", "reviewer_decide", "undo_decision", "open_review", "admit_review_round",
         "extend_review_budget", "record_turn", "list_graduation_proposals_of_category"},
    ),
    "review_agent": (
        {"decide_review", "reviewer_decide", "undo_decision", "get_review", "admit_review_round",
         "settle_review_attempt"},
        {"send_email", "open_review", "cancel_review", "extend_review_budget", "merge_categories"},
    ),
    "human": (
        {"open_review", "decide_review", "undo_decision", "get_review", "post_review_chat"},
        {"send_email", "submit_revision", "admit_review_round", "extend_review_budget", "record_turn"},
    ),
    "admin": (
        {"open_review", "decide_review", "extend_review_budget", "register_runner",
         "list_graduation_proposals_of_category"},
        {"send_email", "admit_review_round", "settle_review_attempt"},
    ),
}  # fmt: skip


async def list_tools_raw(api: Api, headers: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
    """``tools/list`` as bytes on the wire (the JSON-RPC answer's size) and its tools."""
    url = f"http://{api.stack.address(GATEWAY)}/mcp"
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient() as http:
        answer = await http.post(
            url, json=call, headers={**headers, "Accept": "application/json, text/event-stream"}
        )
    assert answer.status_code == 200, answer.text
    return len(answer.content), answer.json()["result"]["tools"]


async def test_a_key_lists_the_tools_of_its_plane_and_an_agent_list_is_under_60_kb(api: Api) -> None:
    project = (await api.project())["project_id"]
    sizes: dict[str, int] = {}
    for kind, (seen, unseen) in PLANES.items():
        key = api.auth((await api.key(project, kind))["api_key"])
        sizes[kind], tools = await list_tools_raw(api, key)
        names = {tool["name"] for tool in tools}
        assert seen <= names, (kind, seen - names)
        assert not unseen & names, (kind, unseen & names)
        async with mcp_client(api, key) as client:  # the SDK's client reads the same list
            assert {tool.name for tool in (await client.list_tools()).tools} == names
    assert sizes["agent"] < 60_000, sizes
    # The bootstrap token is no project key: it lists only the tools without an actor check.
    _, bootstrap = await list_tools_raw(api, api.admin)
    assert {tool["name"] for tool in bootstrap} == {"get_contract_manifest"}


async def test_a_tools_schemas_share_their_parts_and_an_alias_names_its_originals_arguments(api: Api) -> None:
    agent = await api.agent()
    _, listed = await list_tools_raw(api, agent)
    tools = {tool["name"]: tool for tool in listed}
    send = tools["send_email"]["inputSchema"]
    # The intent's shape is written once, in the tool's own $defs, and referenced from its field.
    assert "ReviewIntent" in send["$defs"]
    assert '"#/$defs/ReviewIntent"' in json.dumps(send["properties"]["intent"])
    assert "title" not in json.dumps(send["$defs"]["ReviewIntent"]["properties"]["summary"])
    # An answer's output schema names its fields; their shapes are the OpenAPI document's.
    review = tools["get_review"]["outputSchema"]
    assert {"id", "state", "revision", "version", "proposed_subject"} <= set(review["properties"])
    assert all(schema == {} for schema in review["properties"].values())
    # The catalog's alias names the original's arguments without repeating their schemas.
    alias, original = tools["reply_email"], tools["reply_to_email"]
    assert set(alias["inputSchema"]["properties"]) == set(original["inputSchema"]["properties"])
    assert "reply_to_email" in alias["description"] and "$defs" not in alias["inputSchema"]
    # A tool the plane does not list is still its route: the route's own 403 answers a call.
    async with mcp_client(api, agent) as client:
        refused = structured(await client.call_tool("decide_review", {"id": "rr_x", "action": "approve"}))
    assert refused["status"] in (403, 422), refused


async def test_send_email_then_list_review_events_and_a_409_is_a_tool_error(api: Api) -> None:
    agent = await api.agent()
    async with mcp_client(api, agent) as client:
        sent = await client.call_tool("send_email", draft())
        assert not sent.is_error, sent.content
        submitted = structured(sent)
        assert submitted["status"] == "queued_for_review"
        review_id = submitted["review_id"]

        read = structured(await client.call_tool("get_review", {"review_id": review_id}))
        assert read["id"] == review_id and read["state"] == "needs_review"

        cancel = {"review_id": review_id, "parent_revision": 1}
        assert not (await client.call_tool("cancel_review", cancel)).is_error
        again = await client.call_tool("cancel_review", cancel)
        assert again.is_error
        problem = structured(again)
        assert (problem["status"], problem["code"]) == (409, "terminal")
        assert {"field": "allowed_action", "code": "get_review", "detail": "get_review"} in problem["errors"]

        events: list[dict[str, Any]] = []
        for _ in range(100):  # the nudges cross the outbox asynchronously
            events = structured(await client.call_tool("list_review_events", {"limit": 10}))["events"]
            if len(events) >= 2:
                break
    # The cancel's terminal nudge, then the front_run_next that the 409 terminal promises.
    assert [(e["review_id"], e["reason"]) for e in events] == [
        (review_id, "cancelled"),
        (review_id, "front_run_next"),
    ]


async def test_a_tool_fails_exactly_as_its_route_does(api: Api) -> None:
    agent = await api.agent()
    async with mcp_client(api, agent) as client:
        bad = await client.call_tool("send_email", draft(subject="x" * 5000))
        problem = structured(bad)
        assert bad.is_error and problem["status"] == 422
        assert problem["errors"][0]["field"] == "/subject"

        missing = structured(
            await client.call_tool("get_review", {"review_id": "rr_01JAAAAAAAAAAAAAAAAAAAAAAA"})
        )
        assert (missing["status"], missing["code"]) == (404, "not_found")

        unknown = await client.call_tool("no_such_verb", {})
        assert unknown.is_error and structured(unknown)["code"] == "not_found"

    human = api.auth((await api.key((await api.project())["project_id"], "human"))["api_key"])
    async with mcp_client(api, human) as client:
        refused = structured(await client.call_tool("send_email", draft()))
        assert (refused["status"], refused["code"]) == (403, "forbidden_scope")


async def test_an_idempotency_key_argument_reaches_the_route(api: Api) -> None:
    agent = await api.agent()
    async with mcp_client(api, agent) as client:
        first = structured(await client.call_tool("send_email", {**draft(), "idempotency_key": "mcp-k-1"}))
        second = structured(await client.call_tool("send_email", {**draft(), "idempotency_key": "mcp-k-1"}))
    assert first["review_id"] == second["review_id"]


async def test_mcp_takes_the_same_bearer_keys_and_revocation_is_immediate(api: Api) -> None:
    url = f"http://{api.stack.address(GATEWAY)}/mcp"
    async with httpx2.AsyncClient() as http:
        anonymous = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"] == "application/problem+json"
    assert anonymous.json()["code"] == "unauthorized"

    project = await api.project()
    key = await api.key(project["project_id"])
    async with mcp_client(api, api.auth(key["api_key"])) as client:
        assert not (await client.call_tool("list_review_events", {})).is_error
        revoked = await api.http.post(f"/v1/admin/api-keys/{key['key_id']}/revoke", headers=api.admin)
        assert revoked.status_code == 200
        failed = False
        try:
            result = await client.call_tool("list_review_events", {})
            failed = result.is_error
        except Exception:  # the /mcp endpoint itself now answers 401
            failed = True
    assert failed


async def test_a_request_for_another_host_is_refused_as_dns_rebinding(api: Api) -> None:
    agent = await api.agent()
    url = f"http://{api.stack.address(GATEWAY)}/mcp"
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {**agent, "Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        rebound = await http.post(url, json=call, headers={**headers, "Host": "evil.example:8080"})
        assert rebound.status_code == 421
        foreign = await http.post(url, json=call, headers={**headers, "Origin": "http://evil.example"})
        assert foreign.status_code == 403
        allowed = await http.post(url, json=call, headers=headers)
        assert allowed.status_code == 200, allowed.text
