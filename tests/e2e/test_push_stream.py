"""GET /v1/review-events/stream (issue 19, "Push"): server-sent events of the caller's nudges through a real
gateway, resumed with Last-Event-ID, read by the Python client's ``stream()``."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from reviewloop.client import AsyncReviewloop, ReviewloopError, StreamedEvent
from stack.launcher import Stack
from stack.topology import GATEWAY

from tests.e2e.test_events_wait import Producer


@pytest.fixture
def producer(api: object, stack: Stack) -> Producer:
    return Producer(api, stack)  # type: ignore[arg-type]


async def take(events: AsyncGenerator[StreamedEvent, None], count: int) -> list[StreamedEvent]:
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
