"""The SDK's and the catalog's send and reply inputs (spec/SDK.md #6 and #8, issue 15), through the gateway:
``mode`` (the policy wins over it), ``inbox`` (the From address), a reply's ``thread_id``, ``reply_all``,
``expected_context_version`` and ``expected_last_message_id`` (a thread that moved is ``409
reply_context_changed`` with nothing written), and the ``inbox`` / ``thread_id`` filters of ``list_reviews``."""

from __future__ import annotations

import email
import uuid
from email.policy import default
from typing import Any

from tests.conftest import Api, draft
from tests.e2e.helpers import auto_notify_category
from tests.gateway.test_mcp import mcp_client, structured


async def _setup(api: Api, policy: str = "") -> tuple[str, dict[str, str], dict[str, str]]:
    project = (await api.project())["project_id"]
    agent = api.auth((await api.key(project, "agent"))["api_key"])
    human = api.auth((await api.key(project, "human"))["api_key"])
    if policy:
        set_policy = await api.http.put(
            f"/v1/admin/projects/{project}/review-policy", json={"policy": policy}, headers=api.admin
        )
        assert set_policy.status_code == 200, set_policy.text
    return project, agent, human


async def _reviews(api: Api, agent: dict[str, str], **params: str) -> list[dict[str, Any]]:
    listed = await api.http.get("/v1/reviews", params=params, headers=agent)
    assert listed.status_code == 200, listed.text
    return list(listed.json()["items"])


async def _inbound(api: Api, project: str, **fields: Any) -> dict[str, Any]:
    body = {"from": "vp@acme.com", "to": ["sales@us.example"], "subject": "Q3 pilot", "body_text": "Pricing?"}
    recorded = await api.http.post(
        f"/v1/admin/projects/{project}/inbound", json={**body, **fields}, headers=api.admin
    )
    assert recorded.status_code == 201, recorded.text
    return dict(recorded.json())


def _delivered(api: Api, marker: str) -> email.message.EmailMessage:
    """The one delivered message carrying ``marker`` (the embedded provider writes each as an .eml)."""
    found = [p for p in (api.stack.data_dir / "outbox").glob("*.eml") if marker.encode() in p.read_bytes()]
    assert len(found) == 1, found
    message = email.message_from_bytes(found[0].read_bytes(), policy=default)
    assert isinstance(message, email.message.EmailMessage)
    return message


def _no_intent(**overrides: Any) -> dict[str, Any]:
    body = draft(**overrides)
    del body["intent"]
    return body


async def test_a_direct_request_is_honoured_only_where_the_policy_sends_without_review(api: Api) -> None:
    _, agent, _ = await _setup(api)
    # require_review (the floor): direct is read as a request, not a bypass.
    queued = await api.http.post("/v1/messages", json=draft(mode="direct"), headers=agent)
    assert queued.status_code == 202 and queued.json()["kind"] == "queued_for_review", queued.text
    review = queued.json()["review"]
    assert (review["mode"], review["effective_mode"], review["state"]) == ("direct", "review", "needs_review")
    refused = await api.http.post("/v1/messages", json=_no_intent(mode="direct"), headers=agent)
    assert (refused.status_code, refused.json()["code"]) == (422, "intent_required"), refused.text
    assert [r["id"] for r in await _reviews(api, agent)] == [review["id"]]  # nothing queued for it

    _, agent, _ = await _setup(api, "allow_direct")
    marker = uuid.uuid4().hex
    sent = await api.http.post("/v1/messages", json=draft(mode="direct", subject=marker), headers=agent)
    assert sent.status_code == 202 and sent.json()["kind"] == "sent", sent.text
    review = sent.json()["review"]
    assert (review["mode"], review["effective_mode"], review["send_path"]) == (
        "direct",
        "direct",
        "agent_direct",
    )
    _delivered(api, marker)
    # review: the agent opts into a reviewer even where it could send directly; being review, it needs an intent.
    held = await api.http.post("/v1/messages", json=draft(mode="review"), headers=agent)
    assert held.status_code == 202 and held.json()["kind"] == "queued_for_review", held.text
    assert (held.json()["review"]["mode"], held.json()["review"]["effective_mode"]) == ("review", "review")
    no_intent = await api.http.post("/v1/messages", json=_no_intent(mode="review"), headers=agent)
    assert (no_intent.status_code, no_intent.json()["code"]) == (422, "intent_required"), no_intent.text
    bare = await api.http.post("/v1/messages", json=_no_intent(), headers=agent)
    assert bare.json()["review"]["mode"] == bare.json()["review"]["effective_mode"] == "direct"


async def test_a_direct_request_never_passes_a_block_or_a_graduation_gate(api: Api) -> None:
    project, agent, _ = await _setup(api, "allow_direct")
    blocked = await api.http.post(
        f"/v1/admin/projects/{project}/blocks", json={"address": "vp@acme.com"}, headers=api.admin
    )
    assert blocked.status_code in (200, 201), blocked.text
    refused = await api.http.post("/v1/messages", json=draft(mode="direct"), headers=agent)
    assert (refused.status_code, refused.json()["code"]) == (403, "recipient_blocked"), refused.text
    assert await _reviews(api, agent) == []

    project, agent, _ = await _setup(api)
    category = await auto_notify_category(api, project)
    unsure = await api.http.post(
        "/v1/messages", json=draft(mode="direct", category_id=category, confidence=0.2), headers=agent
    )
    assert unsure.status_code == 202, unsure.text
    review = unsure.json()["review"]
    assert (review["gate_outcome"], review["mode"], review["effective_mode"]) == (
        "held:low_confidence",
        "direct",
        "review",
    )
    confident_but_asked = await api.http.post(
        "/v1/messages", json=draft(mode="review", category_id=category, confidence=0.9), headers=agent
    )
    review = confident_but_asked.json()["review"]
    assert (review["state"], review["effective_mode"]) == ("needs_review", "review"), review
    auto = await api.http.post(
        "/v1/messages", json=draft(mode="direct", category_id=category, confidence=0.9), headers=agent
    )
    review = auto.json()["review"]
    assert (review["send_path"], review["effective_mode"]) == ("graduated_auto", "direct"), review


async def test_the_inbox_is_the_from_address_and_filters_the_list(api: Api) -> None:
    _, agent, _ = await _setup(api, "allow_direct")
    marker = uuid.uuid4().hex
    sent = await api.http.post(
        "/v1/messages", json=_no_intent(inbox="support@us.example", subject=marker), headers=agent
    )
    assert sent.status_code == 202, sent.text
    review = sent.json()["review"]
    assert review["from_address"] == "support@us.example"
    assert _delivered(api, marker)["From"] == "support@us.example"
    other = await api.http.post("/v1/messages", json=_no_intent(), headers=agent)
    assert other.json()["review"]["from_address"] != "support@us.example"
    assert [r["id"] for r in await _reviews(api, agent, inbox="support@us.example")] == [review["id"]]
    assert len(await _reviews(api, agent)) == 2

    bad = await api.http.post("/v1/messages", json=_no_intent(inbox="not-an-address"), headers=agent)
    assert (bad.status_code, bad.json()["code"]) == (422, "bad_request"), bad.text
    assert bad.json()["errors"][0]["field"] == "/inbox"
    wrong_mode = await api.http.post("/v1/messages", json=draft(mode="yolo"), headers=agent)
    assert wrong_mode.status_code == 422 and wrong_mode.json()["errors"][0]["field"] == "/mode", (
        wrong_mode.text
    )
    assert len(await _reviews(api, agent)) == 2  # refusals write nothing


async def test_reply_all_copies_the_other_recipients_but_never_our_own_inbox(api: Api) -> None:
    project, agent, human = await _setup(api)
    parent = await _inbound(
        api, project, to=["sales@us.example", "cto@acme.com"], cc=["cfo@acme.com", "Sales@us.example"]
    )
    marker = uuid.uuid4().hex
    reply = await api.http.post(
        f"/v1/messages/{parent['message_id']}/reply",
        json={"text": f"Thursday? {marker}", "intent": draft()["intent"], "reply_all": True,
              "thread_id": parent["thread_ref"]},
        headers=agent,
    )  # fmt: skip
    assert reply.status_code == 202, reply.text
    review = reply.json()["review"]
    assert (review["to"], review["cc"]) == (["vp@acme.com"], ["cto@acme.com", "cfo@acme.com"])
    assert review["from_address"] == "sales@us.example"
    plain = await api.http.post(
        f"/v1/messages/{parent['message_id']}/reply",
        json={"text": "Thursday?", "intent": draft()["intent"], "second_reply": True},
        headers=agent,
    )
    assert plain.json()["review"]["cc"] == []
    threaded = await _reviews(api, agent, thread_id=parent["thread_ref"])
    assert {r["id"] for r in threaded} == {review["id"], plain.json()["review"]["id"]}

    opened = await api.http.post(
        f"/v1/reviews/{review['id']}/open", json={"revision": 1, "version": 1}, headers=human
    )
    approved = await api.http.post(
        f"/v1/reviews/{review['id']}/decision",
        json={"action": "approve", "revision": 1, "version": opened.json()["version"]},
        headers=human,
    )
    assert approved.status_code == 200 and approved.json()["state"] == "sent", approved.text
    delivered = _delivered(api, marker)
    assert (delivered["To"], delivered["Cc"]) == ("vp@acme.com", "cto@acme.com, cfo@acme.com")


async def test_a_reply_names_its_thread(api: Api) -> None:
    project, agent, _ = await _setup(api)
    first = await _inbound(api, project)
    elsewhere = await _inbound(api, project, subject="Another matter")
    wrong = await api.http.post(
        f"/v1/messages/{elsewhere['message_id']}/reply",
        json={"text": "x", "intent": draft()["intent"], "thread_id": first["thread_ref"]},
        headers=agent,
    )
    assert (wrong.status_code, wrong.json()["errors"][0]["field"]) == (422, "/thread_id"), wrong.text
    missing = await api.http.post(
        "/v1/threads/thread_01JAAAAAAAAAAAAAAAAAAAAAAA/reply",
        json={"text": "x", "intent": draft()["intent"]},
        headers=agent,
    )
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found"), missing.text
    assert await _reviews(api, agent) == []

    # Without a message, a thread's reply answers its newest message.
    later = await _inbound(
        api, project, subject="Re: Q3 pilot", body_text="Also: terms?",
        headers={"In-Reply-To": first["rfc_message_id"]},
    )  # fmt: skip
    assert later["thread_ref"] == first["thread_ref"]
    reply = await api.http.post(
        f"/v1/threads/{first['thread_ref']}/reply",
        json={"text": "Both on Thursday.", "intent": draft()["intent"]},
        headers=agent,
    )
    assert reply.status_code == 202, reply.text
    assert reply.json()["review"]["parent_message_id"] == later["message_id"]
    assert reply.json()["review"]["thread_ref"] == first["thread_ref"]


async def test_a_reply_to_a_thread_that_moved_is_409_and_writes_nothing(api: Api) -> None:
    project, agent, _ = await _setup(api)
    first = await _inbound(api, project)
    read = await api.http.get(f"/v1/threads/{first['thread_ref']}", headers=agent)
    assert read.status_code == 200, read.text
    assert read.json() == {
        "thread_id": first["thread_ref"],
        "context_version": "1",
        "last_message_id": first["message_id"],
    }
    later = await _inbound(
        api, project, subject="Re: Q3 pilot", headers={"In-Reply-To": first["rfc_message_id"]}
    )
    assert later["thread_ref"] == first["thread_ref"]
    body = {"text": "Thursday?", "intent": draft()["intent"]}
    for expected in (
        {"expected_context_version": read.json()["context_version"]},
        {"expected_last_message_id": read.json()["last_message_id"]},
    ):
        moved = await api.http.post(
            f"/v1/messages/{first['message_id']}/reply", json={**body, **expected}, headers=agent
        )
        assert moved.status_code == 409, moved.text
        problem = moved.json()
        assert (problem["code"], problem["next_action"]) == (
            "reply_context_changed",
            "reread_thread_and_recompose",
        )
        assert problem["current_state"] == {
            "thread_id": first["thread_ref"],
            "context_version": "2",
            "last_message_id": later["message_id"],
        }
        assert ("last_message_id", later["message_id"]) in {
            (e["field"], e["detail"]) for e in problem["errors"]
        }
    assert await _reviews(api, agent) == []  # nothing written

    now = (await api.http.get(f"/v1/threads/{first['thread_ref']}", headers=agent)).json()
    fresh = await api.http.post(
        f"/v1/threads/{first['thread_ref']}/reply",
        json={**body, "expected_context_version": now["context_version"],
              "expected_last_message_id": now["last_message_id"]},
        headers=agent,
    )  # fmt: skip
    assert fresh.status_code == 202, fresh.text
    unknown = await api.http.get("/v1/threads/thread_01JAAAAAAAAAAAAAAAAAAAAAAA", headers=agent)
    assert (unknown.status_code, unknown.json()["code"]) == (404, "not_found")


async def test_the_catalogs_reply_email_picks_its_parent_by_thread_or_by_message(api: Api) -> None:
    project, agent, _ = await _setup(api)
    first = await _inbound(api, project)
    later = await _inbound(
        api, project, subject="Re: Q3 pilot", headers={"In-Reply-To": first["rfc_message_id"]}
    )
    async with mcp_client(api, agent) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        arguments = set(tools["reply_email"].input_schema["properties"])
        assert {"message_id", "thread_id", "reply_all", "mode", "inbox", "expected_context_version",
                "expected_last_message_id", "second_reply"} <= arguments  # fmt: skip
        assert {"inbox", "thread_id"} <= set(tools["list_reviews"].input_schema["properties"])
        body = {"text": "Thursday?", "intent": draft()["intent"], "reply_all": True}
        by_thread = structured(
            await client.call_tool(
                "reply_email", {**body, "thread_id": first["thread_ref"], "client_id": "r-1"}
            )
        )
        by_message = structured(
            await client.call_tool(
                "reply_email",
                {**body, "message_id": first["message_id"], "client_id": "r-2", "second_reply": True},
            )
        )
    assert by_thread["review"]["parent_message_id"] == later["message_id"]
    assert by_message["review"]["parent_message_id"] == first["message_id"]
