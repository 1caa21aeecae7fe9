"""Webhooks through the gateway against real processes (issue 19, "Push"): an admin registers an
endpoint, a real receiver on loopback (allowed by REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS, as a deployment
would allow an internal network) gets each nudge signed, a 500 is retried, a rotated secret overlaps, a
private-range URL is refused, and no secret is stored in the clear."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from reviewloop.client import AsyncReviewloop, WebhookVerificationError, verify_webhook
from stack.launcher import Stack, free_port
from stack.topology import GATEWAY

from tests.conftest import INTENT, STACK_PARAMS, Api, Databases, draft, start_stack_for
from tests.e2e.helpers import auto_notify_category, events_until
from tests.e2e.test_events_wait import Producer
from tests.e2e.test_secrets import text_of_every_store
from tests.receiver import receiving

PUSH_ENV = {
    "REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
    "REVIEWLOOP_WEBHOOK_BACKOFF_S": "0.05",
    "REVIEWLOOP_WEBHOOK_BACKOFF_CAP_S": "0.2",
    "REVIEWLOOP_WEBHOOK_KEY": "e2e-webhook-key",
    "REVIEWLOOP_SSE_HEARTBEAT_S": "0.2",
}


@pytest.fixture(scope="module", params=STACK_PARAMS)
async def push_stack(
    request: pytest.FixtureRequest, databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """Each backend, on loopback trust and on the production overlay's (a service key and mTLS)."""
    running = await start_stack_for(request.param, databases, tmp_path_factory, PUSH_ENV)
    yield running
    running.stop_all()


@pytest.fixture
async def producer(push_stack: Stack) -> AsyncIterator[Producer]:
    api = Api(push_stack)
    yield Producer(api, push_stack)
    await api.http.aclose()


async def settled(api: Api, deliveries: str) -> list[dict[str, object]]:
    """The deliveries once none is pending (the sender records an answer after the receiver has it)."""
    async with asyncio.timeout(20):
        for _ in iter(int, 1):
            listed: list[dict[str, object]] = (await api.http.get(deliveries, headers=api.admin)).json()[
                "deliveries"
            ]
            if all(d["status"] != "pending" for d in listed):
                return listed
            await asyncio.sleep(0.05)
    raise AssertionError("unreachable")


def verifies(secret: str, headers: dict[str, str], body: bytes) -> bool:
    try:
        verify_webhook(secret, headers, body)
    except WebhookVerificationError:
        return False
    return True


async def test_a_registered_webhook_gets_each_nudge_signed_retried_and_rotated(producer: Producer) -> None:
    api = producer.api
    _, principal = await producer.agent()
    hooks = f"/v1/admin/projects/{principal.project_id}/webhooks"
    async with receiving() as receiver:
        receiver.statuses = [500]
        headers = {**api.admin, "Idempotency-Key": "register-1"}
        registered = await api.http.post(hooks, json={"url": receiver.url}, headers=headers)
        assert registered.status_code == 201, registered.text
        secret, webhook = registered.json()["secret"], registered.json()["webhook"]
        assert secret.startswith("whsec_") and webhook["secret_version"] == 1
        replayed = await api.http.post(hooks, json={"url": receiver.url}, headers=headers)
        assert replayed.json()["secret"] is None and replayed.json()["note"]  # shown once

        review_id = await producer.publish(principal, "rejected")
        await receiver.until(2)  # a 500, then the retry
        (first_headers, first), (again_headers, again) = receiver.received
        assert first == again and first_headers["webhook-id"] == again_headers["webhook-id"]
        assert verifies(secret, again_headers, again)
        assert not verifies(secret, again_headers, again.replace(b"rejected", b"accepted"))
        event = orjson.loads(again)
        assert event["type"] == "review_event"
        assert (event["data"]["review_id"], event["data"]["reason"]) == (review_id, "rejected")

        deliveries = f"{hooks}/{webhook['webhook_id']}/deliveries"
        # The receiver has the request before the sender records its 2xx: wait for the record.
        listed = await settled(api, deliveries)
        assert [(d["event_id"], d["status"], d["attempts"]) for d in listed] == [
            (event["data"]["id"], "delivered", 2)
        ]

        rotated = await api.http.post(
            f"{hooks}/{webhook['webhook_id']}/rotate-secret", json={"overlap_s": 3600}, headers=api.admin
        )
        assert rotated.status_code == 200, rotated.text
        new_secret = rotated.json()["secret"]
        await producer.publish(principal, "cancelled", review_id)
        await receiver.until(3)
        headers3, body3 = receiver.received[-1]
        assert verifies(secret, headers3, body3) and verifies(new_secret, headers3, body3)

    listed_hooks = (await api.http.get(hooks, headers=api.admin)).json()["webhooks"]
    assert [(w["webhook_id"], w["secret_version"]) for w in listed_hooks] == [(webhook["webhook_id"], 2)]
    assert "secret" not in listed_hooks[0]


async def test_an_endpoint_that_asks_for_humans_notified_gets_each_auto_notify_send(
    producer: Producer,
) -> None:
    """An auto-send in an auto_notify category is a signed ``humans_notified`` event for the endpoint
    that names it, and only for it: an endpoint of every nudge reason gets the agent's nudges alone."""
    api = producer.api
    project = await api.project()
    pid = project["project_id"]
    agent = api.auth((await api.key(pid))["api_key"])
    category = await auto_notify_category(api, pid)
    hooks = f"/v1/admin/projects/{pid}/webhooks"
    async with receiving() as humans, receiving() as agents:
        asked = await api.http.post(
            hooks, json={"url": humans.url, "reasons": ["humans_notified"]}, headers=api.admin
        )
        assert asked.status_code == 201, asked.text
        every = await api.http.post(hooks, json={"url": agents.url}, headers=api.admin)
        assert every.status_code == 201, every.text
        body = draft(subject="renewal", category_id=category, confidence=0.9)
        submitted = await api.http.post("/v1/messages", json=body, headers=agent)
        assert submitted.status_code == 202, submitted.text
        review_id = submitted.json()["review_id"]
        held = await api.http.post("/v1/messages", json={**body, "confidence": 0.2}, headers=agent)
        assert held.status_code == 202, held.text

        await humans.until(1)
        headers, raw = humans.received[0]
        assert verifies(asked.json()["secret"], headers, raw)
        event = orjson.loads(raw)
        assert event["type"] == "humans_notified"
        data = event["data"]
        assert (data["review_id"], data["category_id"], data["subject"]) == (review_id, category, "renewal")
        assert data["to"] == ["vp@acme.com"] and data["summary"] == INTENT["summary"]
        assert headers["webhook-id"] == data["id"]
        await agents.until(1)  # the agent's terminal nudge of the auto-send
        assert {orjson.loads(b)["type"] for _, b in agents.received} == {"review_event"}
    assert len(humans.received) == 1  # the held draft notified nobody


async def test_broadcasts_reach_the_endpoints_of_their_reason_signed_with_the_broadcast_id(
    producer: Producer,
) -> None:
    """A rule change is a broadcast (seq 0, no review): an endpoint that names ``rule_changed`` gets it,
    and so does one that names nothing (every nudge); one that names only ``sent`` does not. Every copy
    carries the broadcast's own id, the id the agent's drain shows."""
    api = producer.api
    project = await api.project()
    pid = project["project_id"]
    agent = api.auth((await api.key(pid))["api_key"])
    human = api.auth((await api.key(pid, "human"))["api_key"])
    hooks = f"/v1/admin/projects/{pid}/webhooks"
    async with receiving() as ruled, receiving() as every, receiving() as sent_only:
        secrets = {}
        for receiver, reasons in ((ruled, ["rule_changed"]), (every, []), (sent_only, ["sent"])):
            made = await api.http.post(
                hooks, json={"url": receiver.url, "reasons": reasons}, headers=api.admin
            )
            assert made.status_code == 201, made.text
            secrets[receiver.url] = (made.json()["secret"], made.json()["webhook"]["webhook_id"])
        saved = await api.http.post(
            "/v1/rules", json={"rule_text": "Propose a concrete time.", "scope": "general"}, headers=human
        )
        assert saved.status_code == 201, saved.text

        await ruled.until(1)
        await every.until(1)
        (seen,) = [e for e in await events_until(api, agent, 1) if e["seq"] == 0]
        for receiver in (ruled, every):
            (headers, raw), secret = receiver.received[0], secrets[receiver.url][0]
            assert verifies(secret, headers, raw)
            assert not verifies(secret, headers, raw.replace(b"concrete", b"vague"))
            event = orjson.loads(raw)
            assert event["type"] == "review_event"
            assert headers["webhook-id"] == event["data"]["id"] == seen["id"]  # stable: dedupe on it
            assert (event["data"]["seq"], event["data"]["reason"]) == (0, "rule_changed")
            assert "review_id" not in event["data"]
            assert event["data"]["payload"]["rule"]["id"] == saved.json()["id"]
        listed = await settled(api, f"{hooks}/{secrets[ruled.url][1]}/deliveries")
        assert [(d["event_id"], d["status"], d.get("review_id")) for d in listed] == [
            (seen["id"], "delivered", None)
        ]
        none = (
            await api.http.get(f"{hooks}/{secrets[sent_only.url][1]}/deliveries", headers=api.admin)
        ).json()
        assert none["deliveries"] == [] and sent_only.received == []


async def test_an_unknown_webhook_reason_is_refused(producer: Producer) -> None:
    api = producer.api
    _, principal = await producer.agent()
    refused = await api.http.post(
        f"/v1/admin/projects/{principal.project_id}/webhooks",
        json={"url": "https://hooks.example.com/x", "reasons": ["humans_notify"]},
        headers=api.admin,
    )
    assert refused.status_code == 422, refused.text
    assert (
        refused.json()["errors"][0]["field"] == "/reasons/0" and "humans_notified" in refused.text
    )  # the refusal lists what an endpoint can ask for


@pytest.mark.parametrize(
    "url", ["http://10.1.2.3/hook", "http://169.254.169.254/latest/meta-data", "http://[::1]/hook"]
)
async def test_a_private_range_url_is_refused(producer: Producer, url: str) -> None:
    api = producer.api
    _, principal = await producer.agent()
    hooks = f"/v1/admin/projects/{principal.project_id}/webhooks"
    refused = await api.http.post(hooks, json={"url": url}, headers=api.admin)
    assert refused.status_code in (400, 422) and refused.json()["code"] == "bad_request", refused.text
    assert refused.json()["errors"][0]["field"] == "/url"
    assert (await api.http.get(hooks, headers=api.admin)).json() == {"webhooks": []}


async def test_only_an_admin_manages_webhooks(producer: Producer) -> None:
    api = producer.api
    agent, principal = await producer.agent()
    hooks = f"/v1/admin/projects/{principal.project_id}/webhooks"
    refused = await api.http.post(hooks, json={"url": "https://hooks.example.com/x"}, headers=agent)
    assert refused.status_code == 403, refused.text


async def test_no_webhook_secret_is_stored(producer: Producer, push_stack: Stack) -> None:
    api = producer.api
    _, principal = await producer.agent()
    hooks = f"/v1/admin/projects/{principal.project_id}/webhooks"
    headers = {**api.admin, "Idempotency-Key": "register-at-rest"}
    registered = await api.http.post(hooks, json={"url": "https://hooks.example.com/x"}, headers=headers)
    secret = registered.json()["secret"].encode()
    rotated = await api.http.post(
        f"{hooks}/{registered.json()['webhook']['webhook_id']}/rotate-secret",
        json={},
        headers=headers | {"Idempotency-Key": "rotate-at-rest"},
    )
    stores = await text_of_every_store(push_stack)
    assert b"hooks.example.com" in stores  # the stores were read
    for shown in (secret, rotated.json()["secret"].encode()):
        assert shown not in stores
        assert not any(shown in p.read_bytes() for p in push_stack.data_dir.rglob("*") if p.is_file())


async def test_an_idle_stream_sends_heartbeats(producer: Producer) -> None:
    agent, _ = await producer.agent()
    async with (
        asyncio.timeout(20),
        producer.api.http.stream("GET", "/v1/review-events/stream", headers=agent) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        heartbeats = 0
        async for line in stream.aiter_lines():
            heartbeats += line == ": heartbeat"
            if heartbeats == 2:
                break


async def test_a_stream_resumes_on_another_gateway_replica(producer: Producer, push_stack: Stack) -> None:
    """A second gateway process on the same stores: the client drops its stream on one replica and
    resumes on the other with Last-Event-ID, no gap, no repeat; a nudge published meanwhile wakes it."""
    second = Stack({**push_stack.env, "REVIEWLOOP_GATEWAY_ADDR": f"127.0.0.1:{free_port()}"})
    second.start(GATEWAY)
    try:
        await second.wait_serving([GATEWAY])
        agent, principal = await producer.agent()
        key = agent["Authorization"].removeprefix("Bearer ")
        first_review = await producer.publish(principal, "rejected")
        second_review = await producer.publish(principal, "feedback_added")
        async with AsyncReviewloop(f"http://{push_stack.address(GATEWAY)}", key) as one:
            stream = one.stream()
            seen = await anext(stream)
            await stream.aclose()
        assert seen.event.review_id == first_review
        async with AsyncReviewloop(f"http://{second.address(GATEWAY)}", key) as other:
            resumed = other.stream(last_event_id=seen.id)
            got = await anext(resumed)
            third_review = await producer.publish(principal, "cancelled", first_review)
            woken = await anext(resumed)
            await resumed.aclose()
        assert (got.event.review_id, got.event.reason) == (second_review, "feedback_added")
        assert (woken.event.review_id, woken.event.reason, woken.event.seq) == (third_review, "cancelled", 2)
    finally:
        second.stop_all()
