"""GET /v1/review-events/stream (issue 19, "Push"): server-sent events of the caller's nudges through a real
gateway, resumed with Last-Event-ID, read by the Python client's ``stream()``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator

import pytest
from reviewloop.client import AsyncReviewloop, Reviewloop, ReviewloopError, StreamedEvent
from reviewloop.tenancy import ActorKind, Principal
from stack.launcher import Stack
from stack.topology import GATEWAY

from tests.conftest import STACK_PARAMS, Api, Databases, start_stack_for
from tests.e2e.test_events_wait import Producer
from tests.e2e.test_operations import samples


@pytest.fixture(scope="module", params=STACK_PARAMS)
async def stack(
    request: pytest.FixtureRequest, databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """This module's stacks: each backend, on loopback trust and on the production overlay's (a service
    key and mTLS), where the stream once answered 200 and never sent an event (issue 36)."""
    running = await start_stack_for(request.param, databases, tmp_path_factory)
    yield running
    running.stop_all()


@pytest.fixture
def producer(api: object, stack: Stack) -> Producer:
    return Producer(api, stack)  # type: ignore[arg-type]


async def take(events: AsyncGenerator[StreamedEvent, None], count: int) -> list[StreamedEvent]:
    async with asyncio.timeout(20):  # a silent stream fails here instead of hanging
        taken = [await anext(events) for _ in range(count)]
    await events.aclose()  # drops the connection, as a crashed consumer would
    return taken


def key_of(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


async def test_the_stream_resumes_after_a_dropped_connection_with_no_gap_and_no_repeat(
    producer: Producer, stack: Stack
) -> None:
    headers, principal = await producer.agent()
    first = await producer.publish(principal, "rejected")
    second = await producer.publish(principal, "feedback_added")
    async with AsyncReviewloop(f"http://{stack.address(GATEWAY)}", key_of(headers)) as rl:
        seen = await take(rl.stream(), 2)
        assert [(s.event.review_id, s.event.reason, s.event.seq) for s in seen] == [
            (first, "rejected", 1),
            (second, "feedback_added", 1),
        ]
        # Lands while no stream is open; the resumed stream starts right after the last event seen.
        third = await producer.publish(principal, "cancelled", second)
        resumed = rl.stream(last_event_id=seen[-1].id)
        got = await anext(resumed)
        assert (got.event.review_id, got.event.reason, got.event.seq) == (third, "cancelled", 2)
        # And a nudge published while the stream is open arrives on it.
        fourth = await producer.publish(principal, "sent")
        live = await anext(resumed)
        await resumed.aclose()
        assert (live.event.review_id, live.event.reason) == (fourth, "sent")
        assert int(live.id) > int(got.id) > int(seen[-1].id)


async def test_an_acked_nudge_is_never_streamed(producer: Producer, stack: Stack) -> None:
    headers, principal = await producer.agent()
    acked = await producer.publish(principal, "rejected")
    kept = await producer.publish(principal, "cancelled")
    async with AsyncReviewloop(f"http://{stack.address(GATEWAY)}", key_of(headers)) as rl:
        assert (await rl.ack_review_events([(acked, 1)])).acked == 1
        (only,) = await take(rl.stream(), 1)
        assert only.event.review_id == kept
        # From the start again (no Last-Event-ID): still not the acked one.
        (again,) = await take(rl.stream(), 1)
        assert again.event.review_id == kept and again.id == only.id


async def test_a_stream_shows_only_the_callers_nudges_and_refuses_a_bad_last_event_id(
    producer: Producer, stack: Stack
) -> None:
    (alice, alice_p), (bob, bob_p) = await producer.agent(), await producer.agent()
    await producer.publish(alice_p, "rejected")
    bobs = await producer.publish(bob_p, "cancelled")
    async with AsyncReviewloop(f"http://{stack.address(GATEWAY)}", key_of(bob)) as rl:
        (only,) = await take(rl.stream(), 1)
        assert only.event.review_id == bobs
    async with producer.api.http.stream(
        "GET", "/v1/review-events/stream", headers={**alice, "Last-Event-ID": "not-a-number"}
    ) as refused:
        await refused.aread()
        assert refused.status_code == 422 and refused.json()["code"] == "bad_request", refused.text
    async with AsyncReviewloop(f"http://{stack.address(GATEWAY)}", "rlk_nope") as bad:
        with pytest.raises(ReviewloopError) as error:
            await anext(bad.stream())
        assert error.value.status == 401


async def gauges(api: Api) -> tuple[float, float]:
    """The gateway's open event streams and the shared reads they cost."""
    text = (await api.http.get("/metrics")).text
    (streams,) = samples(text, "reviewloop_gateway_event_streams")
    (feeds,) = samples(text, "reviewloop_gateway_event_feeds")
    return streams, feeds


async def until_gauges(api: Api, wanted: tuple[float, float]) -> None:
    deadline = time.monotonic() + 15
    while (seen := await gauges(api)) != wanted:
        assert time.monotonic() < deadline, seen
        await asyncio.sleep(0.05)


async def test_a_projects_streams_share_one_read_and_each_sees_only_what_its_key_may(
    api: Api, stack: Stack
) -> None:
    project = await api.project()
    alice, bob, human = [await api.key(project["project_id"], kind) for kind in ("agent", "agent", "human")]
    alice_p, bob_p = (
        Principal(k["org_id"], k["project_id"], ActorKind.AGENT, k["agent_id"]) for k in (alice, bob)
    )
    base = f"http://{stack.address(GATEWAY)}"
    await until_gauges(api, (0, 0))  # earlier tests' streams have closed
    clients = [AsyncReviewloop(base, k["api_key"]) for k in (alice, alice, alice, bob, bob, human)]
    streams = [client.stream() for client in clients]
    pending = [asyncio.ensure_future(anext(s)) for s in streams]
    try:
        await until_gauges(api, (6, 1))  # six streams, one read of the nudge service
        producer = Producer(api, stack)
        alices = await producer.publish(alice_p, "rejected")
        bobs = await producer.publish(bob_p, "cancelled")
        rule = await api.http.post(
            "/v1/rules",
            json={"rule_text": "Be brief.", "scope": "general"},
            headers=api.auth(human["api_key"]),
        )
        assert rule.status_code == 201, rule.text
        seen: list[list[tuple[str | None, int]]] = []
        for stream, first in zip(streams, pending, strict=True):
            got = [await first]
            wanted = 3 if stream is streams[-1] else 2
            got += [await anext(stream) for _ in range(wanted - 1)]
            seen.append(sorted((g.event.review_id or "", g.event.seq) for g in got))
        assert seen == [
            *[sorted([(alices, 1), ("", 0)])] * 3,
            *[sorted([(bobs, 1), ("", 0)])] * 2,
            sorted([(alices, 1), (bobs, 1), ("", 0)]),
        ]
    finally:
        for stream in streams:
            await stream.aclose()
        for client in clients:
            await client.aclose()
    await until_gauges(api, (0, 0))  # the last stream of a project closes its read


async def test_a_stream_resumes_across_broadcasts_with_no_gap_and_no_repeat(
    producer: Producer, stack: Stack
) -> None:
    headers, principal = await producer.agent()
    api = producer.api
    first = await producer.publish(principal, "rejected")
    human = api.auth((await api.key(principal.project_id, "human"))["api_key"])
    saved = await api.http.post(
        "/v1/rules", json={"rule_text": "Be brief.", "scope": "general"}, headers=human
    )
    assert saved.status_code == 201, saved.text
    async with AsyncReviewloop(f"http://{stack.address(GATEWAY)}", key_of(headers)) as rl:
        seen = await take(rl.stream(), 2)
        assert sorted((s.event.review_id or "", s.event.seq) for s in seen) == sorted([(first, 1), ("", 0)])
        later = await producer.publish(principal, "cancelled", first)
        resumed = rl.stream(last_event_id=seen[-1].id)
        got = await anext(resumed)
        await resumed.aclose()
        assert (got.event.review_id, got.event.reason, got.event.seq) == (later, "cancelled", 2)
        # Acking the broadcast by id: a fresh stream shows only the review's nudges.
        broadcast = next(s.event for s in seen if s.event.seq == 0)
        await rl.ack_review_event(broadcast_ids=[broadcast.id])
        (again,) = await take(rl.stream(), 1)
        assert again.event.review_id == first


async def test_the_sync_clients_stream_resumes_with_no_gap_and_no_repeat(
    producer: Producer, stack: Stack
) -> None:
    headers, principal = await producer.agent()
    review_id = await producer.publish(principal, "rejected")
    await producer.publish(principal, "cancelled", review_id)

    def read() -> list[StreamedEvent]:
        with Reviewloop(f"http://{stack.address(GATEWAY)}", key_of(headers)) as rl:
            first = rl.stream()
            seen = [next(first)]
            first.close()  # drops the connection
            resumed = rl.stream(last_event_id=seen[0].id)
            seen.append(next(resumed))
            resumed.close()
            return seen

    seen = await asyncio.to_thread(read)
    assert [(s.event.review_id, s.event.reason, s.event.seq) for s in seen] == [
        (review_id, "rejected", 1),
        (review_id, "cancelled", 2),
    ]
