"""The review-event routes through the gateway, and Subscribe over gRPC, against real processes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import orjson
import pytest
from nudge.wakeup import RECHECK_S
from reviewloop.common.v1 import common_pb2
from reviewloop.ids import new_id
from reviewloop.nudge.v1 import nudge_pb2, nudge_pb2_grpc
from reviewloop.tenancy import ActorKind, Principal
from stack.launcher import Stack

from tests.conftest import Api, draft
from tests.e2e.helpers import events_until
from tests.nudge.factory import event


async def submit(api: Api, headers: dict[str, str]) -> str:
    sent = await api.http.post("/v1/messages", json=draft(), headers=headers)
    assert sent.status_code == 202, sent.text
    return str(sent.json()["review_id"])


async def cancel(api: Api, headers: dict[str, str], review_id: str) -> None:
    cancelled = await api.http.post(
        f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=headers
    )
    assert cancelled.status_code == 200, cancelled.text


class Producer:
    """Publishes nudges the way review_state's relay does: one outbox event per Ingest call."""

    def __init__(self, api: Api, stack: Stack) -> None:
        self.api, self.stack = api, stack

    async def agent(self) -> tuple[dict[str, str], Principal]:
        project = await self.api.project()
        key = await self.api.key(project["project_id"])
        return self.api.auth(key["api_key"]), Principal(
            key["org_id"], key["project_id"], ActorKind.AGENT, key["agent_id"]
        )

    async def publish(self, principal: Principal, reason: str, review_id: str | None = None) -> str:
        review_id = review_id or new_id("rr")
        # As review_state's relay: with the stack's credentials (a service token, a client certificate).
        async with self.stack.trust.channel(self.stack.address("nudge"), (), []) as channel:
            await nudge_pb2_grpc.NudgeServiceStub(channel).Ingest(
                common_pb2.IngestRequest(events=[event(review_id, reason, principal=principal)])
            )
        return review_id


@pytest.fixture
def producer(api: Api, stack: Stack) -> Producer:
    return Producer(api, stack)


async def test_wait_for_review_event_answers_as_soon_as_a_nudge_lands(producer: Producer) -> None:
    api = producer.api
    headers, principal = await producer.agent()
    waiting = asyncio.create_task(
        api.http.get("/v1/review-events/wait", params={"timeout_s": 30}, headers=headers)
    )
    await asyncio.sleep(0.3)
    assert not waiting.done()
    started = time.monotonic()
    review_id = await producer.publish(principal, "rejected")
    answered = await asyncio.wait_for(waiting, 10)
    # Well inside the server's safety-net recheck: the publish woke the wait (speed is `make bench`'s).
    assert time.monotonic() - started < RECHECK_S / 2
    assert answered.status_code == 200, answered.text
    (nudge,) = answered.json()["events"]
    assert set(nudge) == {"seq", "id", "reason", "review_id", "payload", "created_at"}  # no empty category_id
    assert (nudge["reason"], nudge["review_id"], nudge["seq"]) == ("rejected", review_id, 1)
    assert nudge["id"].startswith("ndg_") and nudge["created_at"].endswith("Z")


async def test_a_cancel_through_review_state_wakes_the_wait(api: Api) -> None:
    agent = await api.agent()
    review_id = await submit(api, agent)
    waiting = asyncio.create_task(
        api.http.get("/v1/review-events/wait", params={"timeout_s": 30}, headers=agent)
    )
    await asyncio.sleep(0.3)
    await cancel(api, agent, review_id)
    answered = await asyncio.wait_for(waiting, 10)
    assert [(e["reason"], e["review_id"], e["seq"]) for e in answered.json()["events"]] == [
        ("cancelled", review_id, 1)
    ]
    assert answered.json()["events"][0]["payload"]["state"] == "cancelled"


async def test_wait_for_review_event_times_out_with_no_events(api: Api) -> None:
    agent = await api.agent()
    started = time.monotonic()
    answered = await api.http.get("/v1/review-events/wait", params={"timeout_s": 1}, headers=agent)
    assert answered.status_code == 200, answered.text
    assert answered.json() == {"events": [], "cursors": []}
    assert 0.9 <= time.monotonic() - started < 3


async def test_wait_for_review_event_clamps_its_wait_to_1_to_55_s(producer: Producer) -> None:
    api = producer.api
    agent, principal = await producer.agent()
    # Below the floor: waits 1 s (clamped), not refused.
    short = await api.http.get("/v1/review-events/wait", params={"timeout_s": "0"}, headers=agent)
    assert short.status_code == 200 and short.json() == {"events": [], "cursors": []}, short.text
    # Past the ceiling: waits at most 55 s (clamped), not refused; a nudge already there answers at once.
    review_id = await producer.publish(principal, "rejected")
    for timeout_s in ("61", "600"):
        long = await api.http.get("/v1/review-events/wait", params={"timeout_s": timeout_s}, headers=agent)
        assert long.status_code == 200, long.text
        assert [e["review_id"] for e in long.json()["events"]] == [review_id]
    for garbage in ("forever", "inf", "nan"):
        refused = await api.http.get("/v1/review-events/wait", params={"timeout_s": garbage}, headers=agent)
        assert refused.status_code == 422, refused.text
        assert refused.json()["code"] == "bad_request"
        assert refused.json()["errors"][0]["field"] == "/timeout_s"


async def test_two_agents_in_two_projects_never_see_each_others_nudges(producer: Producer) -> None:
    api = producer.api
    (alice, alice_p), (bob, bob_p) = await producer.agent(), await producer.agent()
    alice_review = await producer.publish(alice_p, "rejected")
    bob_review = await producer.publish(bob_p, "cancelled")

    for me, mine in ((alice, alice_review), (bob, bob_review)):
        listed = await events_until(api, me, 1)
        assert [e["review_id"] for e in listed] == [mine]
        waited = (await api.http.get("/v1/review-events/wait", params={"timeout_s": 5}, headers=me)).json()
        assert [e["review_id"] for e in waited["events"]] == [mine]
    foreign = await api.http.post(
        "/v1/review-events/ack", json={"acks": [{"review_id": bob_review, "seq": 1}]}, headers=alice
    )
    assert foreign.status_code == 404 and foreign.json()["code"] == "not_found"
    assert [e["review_id"] for e in await events_until(api, bob, 1)] == [bob_review]


async def test_acking_past_the_head_is_refused_and_acks_are_idempotent(producer: Producer) -> None:
    api = producer.api
    agent, principal = await producer.agent()
    review_id = await producer.publish(principal, "cancelled")
    await events_until(api, agent, 1)
    past = await api.http.post(
        "/v1/review-events/ack", json={"acks": [{"review_id": review_id, "seq": 2}]}, headers=agent
    )
    assert past.status_code == 400 and past.json()["code"] == "bad_request"
    for _ in range(2):
        acked = await api.http.post(
            "/v1/review-events/ack", json={"acks": [{"review_id": review_id, "seq": 1}]}, headers=agent
        )
        assert acked.status_code == 200, acked.text
        assert acked.json() == {"acked": 1, "cursors": [{"review_id": review_id, "last_acked_seq": 1}]}
    assert (await api.http.get("/v1/review-events", headers=agent)).json()["events"] == []
    await producer.publish(principal, "feedback_added", review_id)  # after the terminal: refused
    assert (await api.http.get("/v1/review-events", headers=agent)).json()["events"] == []


async def test_the_event_routes_carry_the_spec_verb_names(api: Api) -> None:
    paths = (await api.http.get("/openapi.json")).json()["paths"]
    assert paths["/v1/review-events"]["get"]["operationId"] == "list_review_events"
    assert paths["/v1/review-events/wait"]["get"]["operationId"] == "wait_for_review_event"
    assert paths["/v1/review-events/ack"]["post"]["operationId"] == "ack_review_events"


async def test_subscribe_streams_each_nudge_to_an_internal_consumer(producer: Producer) -> None:
    _, principal = await producer.agent()
    first = await producer.publish(principal, "rejected")
    async with grpc.aio.insecure_channel(producer.stack.address("nudge")) as channel:
        stream = nudge_pb2_grpc.NudgeServiceStub(channel).Subscribe(
            nudge_pb2.SubscribeRequest(principal=principal.to_proto()), timeout=20
        )
        received: list[Any] = []
        async for item in stream:
            received.append(item)
            if len(received) == 1:
                second = await producer.publish(principal, "cancelled")  # lands while the stream is open
            if len(received) == 2:
                stream.cancel()
                break
    assert [(r.nudge.review_id, r.nudge.reason, r.nudge.seq) for r in received] == [
        (first, "rejected", 1),
        (second, "cancelled", 1),
    ]
    assert orjson.loads(received[1].nudge.payload_json)["state"] == "cancelled"
    assert received[1].cursor
