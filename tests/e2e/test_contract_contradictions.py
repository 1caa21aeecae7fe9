"""Spec 000's last contradictions (issue 34), each through the gateway: a keyed decision retried without a
version, a restamp that names nothing, a draft sent without a composition token, a verb on an approved
review whose send is in flight, a direct release that outlasts the wait, a second pending reply."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from stack.launcher import Stack, free_port

from tests.conftest import BACKENDS, Api, Databases, draft, start_stack


async def _setup(api: Api) -> tuple[str, dict[str, str], dict[str, str]]:
    """A project with an agent key and a human key."""
    project = (await api.project())["project_id"]
    agent = api.auth((await api.key(project, "agent"))["api_key"])
    human = api.auth((await api.key(project, "human"))["api_key"])
    return project, agent, human


async def _send(api: Api, agent: dict[str, str], **overrides: Any) -> dict[str, Any]:
    response = await api.http.post("/v1/messages", json=draft(**overrides), headers=agent)
    assert response.status_code == 202, response.text
    return dict(response.json())


def _facts(problem: dict[str, Any]) -> set[tuple[str, Any]]:
    return {(e["field"], e["detail"]) for e in problem.get("errors", [])}


async def test_a_keyed_decision_retried_without_a_version_answers_the_replay(api: Api) -> None:
    _, agent, human = await _setup(api)
    review_id = (await _send(api, agent))["review_id"]
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200, opened.text
    keyed = {**human, "Idempotency-Key": f"decide-{uuid.uuid4().hex}"}
    body = {"action": "approve", "revision": opened.json()["revision"]}  # no version: the SDK's optional
    first = await api.http.post(f"/v1/reviews/{review_id}/decision", json=body, headers=keyed)
    assert first.status_code == 200, first.text
    # The first call moved the version on; the same body again is its replay, not "a different body".
    again = await api.http.post(f"/v1/reviews/{review_id}/decision", json=body, headers=keyed)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == review_id and again.json()["state"] in ("approved", "sent")
    # A different body under the key is still the caller's bug.
    other = await api.http.post(
        f"/v1/reviews/{review_id}/decision", json={**body, "action": "reject"}, headers=keyed
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict", other.text


async def test_a_restamp_that_names_no_rule_snapshot_is_422_naming_the_fields(api: Api) -> None:
    _, agent, _ = await _setup(api)
    review_id = (await _send(api, agent))["review_id"]
    before = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    unnamed = await api.http.post(
        f"/v1/reviews/{review_id}/restamp", json={"parent_revision": 1}, headers=agent
    )
    assert unnamed.status_code == 422, unnamed.text
    problem = unnamed.json()
    assert {e["field"] for e in problem["errors"]} >= {"/composition_token", "/against_version"}
    assert "composition_token" in problem["detail"] and "get_rules" in problem["detail"]
    after = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert after["version"] == before["version"]  # nothing recorded
    # Naming the snapshot re-read (the token of an unfiltered get_rules) stamps it.
    token = (await api.http.get("/v1/rules", headers=agent)).json()["composition_token"]
    named = await api.http.post(
        f"/v1/reviews/{review_id}/restamp",
        json={"parent_revision": 1, "composition_token": token},
        headers=agent,
    )
    assert named.status_code == 200, named.text
    assert named.json()["version"] == before["version"] + 1


class SlowRelay:
    """An SMTP relay that takes ``delay_s`` to answer DATA: a delivery that outlasts the wait."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.received: list[bytes] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        await asyncio.sleep(self.delay_s)
        self.received.append(envelope.original_content)
        return "250 OK"


@pytest.fixture(scope="module", params=BACKENDS)
async def slow_stack(
    request: pytest.FixtureRequest, databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """One stack (per backend) on a relay slower than review_state's delivery wait (0.3 s)."""
    relay = SlowRelay(delay_s=4.0)
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    extra = {"REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}", "REVIEWLOOP_DELIVERY_WAIT_S": "0.3"}
    backend = str(request.param)
    stack = await start_stack(databases, backend, tmp_path_factory.mktemp(f"slow-{backend}"), extra)
    try:
        yield stack
    finally:
        stack.stop_all()
        controller.stop()


@pytest.fixture
async def slow_api(slow_stack: Stack) -> AsyncIterator[Api]:
    client = Api(slow_stack)
    try:
        yield client
    finally:
        await client.http.aclose()


async def test_a_verb_on_an_approved_review_whose_send_is_in_flight_is_wrong_state(slow_api: Api) -> None:
    api = slow_api
    _, agent, human = await _setup(api)
    review_id = (await _send(api, agent))["review_id"]
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
    assert decided.json()["state"] == "approved"
    read = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert read["state"] == "approved" and read["delivery"]["status"] in ("queued", "sending"), read
    cancel = await api.http.post(
        f"/v1/reviews/{review_id}/cancel", json={"parent_revision": decided.json()["revision"]}, headers=agent
    )
    assert cancel.status_code == 409, cancel.text
    problem = cancel.json()
    assert problem["code"] == "wrong_state", problem  # "nothing: it is being delivered", not parked
    assert ("state", "approved") in _facts(problem)
    assert {a for f, a in _facts(problem) if f == "allowed_action"} == {"get_review", "list_review_events"}


async def test_a_direct_release_that_outlasts_the_wait_answers_status_and_kind_sent_with_its_message_id(
    slow_api: Api,
) -> None:
    api = slow_api
    project, agent, _ = await _setup(api)
    policy = await api.http.put(
        f"/v1/admin/projects/{project}/review-policy", json={"policy": "allow_direct"}, headers=api.admin
    )
    assert policy.status_code == 200, policy.text
    released = await api.http.post("/v1/messages", json=draft(intent=None), headers=agent)
    assert released.status_code == 202, released.text
    body = released.json()
    assert body["state"] == "approved"  # still being delivered
    assert (body["status"], body["kind"]) == ("sent", "sent"), body
    assert body["message_id"].startswith("msg_") and body["review_id"].startswith("rr_")
    assert body["message"]["id"] == body["message_id"]
    # The id it names is the one the delivered review carries.
    for _ in range(100):
        review = (await api.http.get(f"/v1/reviews/{body['review_id']}", headers=agent)).json()
        if review["state"] != "approved":
            break
        await asyncio.sleep(0.1)
    assert review["state"] == "auto_sent" and review["message_id"] == body["message_id"], review


async def test_a_second_reply_to_a_thread_with_one_pending_is_409_unless_it_says_it_means_one(
    api: Api,
) -> None:
    project, agent, _ = await _setup(api)
    inbound = await api.http.post(
        f"/v1/admin/projects/{project}/inbound",
        json={
            "from": "vp@acme.com",
            "to": ["sales@us.example"],
            "subject": "Q3 pilot",
            "body_text": "Pricing?",
        },
        headers=api.admin,
    )
    assert inbound.status_code == 201, inbound.text
    parent = inbound.json()
    reply = {"body_text": "Thursday 2pm?", "intent": draft()["intent"]}
    first = await api.http.post(f"/v1/messages/{parent['message_id']}/reply", json=reply, headers=agent)
    assert first.status_code == 202, first.text
    pending_id = first.json()["review_id"]

    again = await api.http.post(
        f"/v1/messages/{parent['message_id']}/reply", json={**reply, "body_text": "Or Friday?"}, headers=agent
    )
    assert again.status_code == 409, again.text
    problem = again.json()
    assert problem["code"] == "reply_already_pending" and pending_id in problem["detail"]
    assert "second_reply" in problem["detail"]
    assert ("review_id", pending_id) in _facts(problem)
    by_thread = await api.http.post(
        f"/v1/threads/{parent['thread_ref']}/reply", json={**reply, "body_text": "Or Friday?"}, headers=agent
    )
    assert by_thread.status_code == 409 and by_thread.json()["code"] == "reply_already_pending"
    listed = await api.http.get("/v1/reviews", params={"thread_id": parent["thread_ref"]}, headers=agent)
    assert [r["id"] for r in listed.json()["items"]] == [pending_id]  # nothing written

    meant = await api.http.post(
        f"/v1/messages/{parent['message_id']}/reply",
        json={**reply, "body_text": "Or Friday?", "second_reply": True},
        headers=agent,
    )
    assert meant.status_code == 202, meant.text
    # Once the first is withdrawn, a reply is the only pending one again... and the second still is.
    cancelled = await api.http.post(f"/v1/reviews/{pending_id}/cancel", json={}, headers=agent)
    assert cancelled.status_code == 200, cancelled.text
    third = await api.http.post(f"/v1/messages/{parent['message_id']}/reply", json=reply, headers=agent)
    assert third.status_code == 409 and meant.json()["review_id"] in third.json()["detail"]


async def test_a_send_without_a_composition_token_says_it_named_no_rule_snapshot(api: Api) -> None:
    project = (await api.project())["project_id"]
    agent = api.auth((await api.key(project, "agent"))["api_key"])
    human_key = (await api.key(project, "human"))["api_key"]
    created = await api.http.post(
        f"/v1/admin/projects/{project}/categories", json={"name": "Sales"}, headers=api.admin
    )
    assert created.status_code == 201, created.text
    category = created.json()["id"]
    rules = (await api.http.get("/v1/rules", params={"category_id": category}, headers=agent)).json()
    named = await _send(api, agent, category_id=category, composition_token=rules["composition_token"])
    unnamed = await _send(api, agent, category_id=category, subject="No token")
    assert named["review"]["rule_snapshot_named"] is True
    review = unnamed["review"]
    assert review["rule_snapshot_named"] is False  # not "composed under" the high-water it was stamped with
    read = (await api.http.get(f"/v1/reviews/{review['id']}", headers=agent)).json()
    assert read["rule_snapshot_named"] is False and read["rule_high_water"] == rules["rule_high_water"]

    pacing = f"/v1/categories/{category}/pacing"
    items = {i["review_id"]: i for i in (await api.http.get(pacing, headers=agent)).json()["items"]}
    assert items[review["id"]]["rule_snapshot_named"] is False
    assert items[named["review_id"]]["rule_snapshot_named"] is True

    # A rule saved after it still leaves it stale, like the draft that named its snapshot.
    saved = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Sign off with a first name.", "scope": "category", "category_id": category},
        headers=api.auth(human_key),
    )
    assert saved.status_code == 201, saved.text
    backlog = f"/v1/categories/{category}/backlog"
    for _ in range(100):
        stale = (await api.http.get(backlog, headers=agent)).json()["stale"]
        if stale == 2:
            break
        await asyncio.sleep(0.1)
    assert stale == 2

    # The console's review page says so.
    signed = await api.http.post(
        "/console/sign-in", data={"key": human_key, "next": "/console/queue"}, follow_redirects=False
    )
    assert signed.status_code == 303, signed.text
    page = await api.http.get(f"/console/reviews/{review['id']}")
    assert page.status_code == 200 and "named no rule snapshot" in page.text
    other = await api.http.get(f"/console/reviews/{named['review_id']}")
    assert other.status_code == 200 and "named no rule snapshot" not in other.text
    api.http.cookies.clear()


async def test_a_project_can_require_a_composition_token_and_the_refusal_says_how_to_get_one(
    api: Api,
) -> None:
    project, agent, _ = await _setup(api)
    settings = f"/v1/admin/projects/{project}/composition-settings"
    forbidden = await api.http.put(settings, json={"require_composition_token": True}, headers=agent)
    assert forbidden.status_code in (401, 403), forbidden.text
    required = await api.http.put(settings, json={"require_composition_token": True}, headers=api.admin)
    assert required.status_code == 200, required.text
    assert required.json()["require_composition_token"] is True
    assert required.json()["policy"] == "require_review"  # the policy stays as it was
    policy = (await api.http.get("/v1/review-policy", headers=agent)).json()
    assert policy["require_composition_token"] is True  # an agent knows before it sends

    refused = await api.http.post("/v1/messages", json=draft(), headers=agent)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["errors"][0]["field"] == "/composition_token"
    assert "get_rules" in problem["detail"] and "GET /v1/rules" in problem["detail"]
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["items"] == []  # nothing queued

    token = (await api.http.get("/v1/rules", headers=agent)).json()["composition_token"]
    sent = await api.http.post("/v1/messages", json=draft(composition_token=token), headers=agent)
    assert sent.status_code == 202 and sent.json()["review"]["rule_snapshot_named"] is True, sent.text
    relaxed = await api.http.put(settings, json={"require_composition_token": False}, headers=api.admin)
    assert relaxed.status_code == 200 and relaxed.json()["require_composition_token"] is False
    assert (await api.http.post("/v1/messages", json=draft(), headers=agent)).status_code == 202


async def test_two_replies_racing_to_one_thread_queue_one(api: Api) -> None:
    project, agent, _ = await _setup(api)
    inbound = await api.http.post(
        f"/v1/admin/projects/{project}/inbound",
        json={
            "from": "vp@acme.com",
            "to": ["sales@us.example"],
            "subject": "Q3 pilot",
            "body_text": "Pricing?",
        },
        headers=api.admin,
    )
    parent = inbound.json()
    replies = await asyncio.gather(
        *(
            api.http.post(
                f"/v1/messages/{parent['message_id']}/reply",
                json={"body_text": f"Thursday {n}?", "intent": draft()["intent"]},
                headers=agent,
            )
            for n in range(2)
        )
    )
    assert sorted(r.status_code for r in replies) == [202, 409], [r.text for r in replies]
    listed = await api.http.get("/v1/reviews", params={"thread_id": parent["thread_ref"]}, headers=agent)
    assert len(listed.json()["items"]) == 1
