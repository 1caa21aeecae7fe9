"""Crash: SIGKILL the nudge process while an outbox relay is delivering to it; after a restart every
event has landed exactly once, in order.

The producer is a store of the test's own with the same outbox and the same ``Relay`` review_state
runs, so the test controls exactly what is in flight when the receiver dies.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.service import CHANNEL_OPTIONS
from reviewloop.storage import Database, make_engine, new_metadata
from reviewloop.storage.outbox import Relay, ingest_method
from reviewloop.storage.schema import OUTBOX
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import func, select
from stack.launcher import Stack

from tests.conftest import Api, Databases, draft, start_stack
from tests.nudge.factory import body

REVIEWS = 40
# Per review: a lifecycle nudge, the terminal one, then a 409 hammered twice (collapses to one row).
SCRIPT = ("rejected", "cancelled", "front_run_next", "front_run_next")
STORED = [("rejected", 1), ("cancelled", 2), ("front_run_next", 3)]


@pytest.fixture
async def own_stack(databases: Databases, backend: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack of this test's own, since the test kills and restarts its nudge service."""
    running = await start_stack(databases, backend, tmp_path)
    yield running
    running.stop_all()


@pytest.fixture
async def producer(databases: Databases, backend: str) -> AsyncIterator[Database]:
    db = Database(make_engine(await databases.url(backend, "producer")))
    async with db.engine.begin() as conn:
        await conn.run_sync(new_metadata().create_all)
    yield db
    await db.dispose()


async def undelivered(db: Database) -> int:
    """Outbox rows for the nudge service not yet delivered."""
    async with db.engine.connect() as conn:
        pending = select(func.count()).where(OUTBOX.c.destination == "nudge", OUTBOX.c.delivered_at.is_(None))
        return int(await conn.scalar(pending) or 0)


async def all_events(api: Api, headers: dict[str, str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    cursor = ""
    while True:
        params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        response = await api.http.get("/v1/review-events", params=params, headers=headers)
        assert response.status_code == 200, response.text
        events += response.json()["events"]
        cursor = response.json()["next_cursor"]
        if not cursor:
            return events


@pytest.mark.microservices_only(
    "SIGKILLs nudge alone while a relay streams to it (make chaos --target all kills the monolith)"
)
async def test_sigkill_while_the_relay_delivers_loses_and_doubles_nothing(
    own_stack: Stack, producer: Database
) -> None:
    api = Api(own_stack)
    project = await api.project()
    key = await api.key(project["project_id"])
    agent = api.auth(key["api_key"])
    principal = Principal(key["org_id"], key["project_id"], ActorKind.AGENT, key["agent_id"])
    ids = [f"rr_crash{i:03d}" for i in range(REVIEWS)]
    async with producer.transaction() as uow:
        for reason in SCRIPT:  # interleaved across reviews, as concurrent reviews would be
            for review_id in ids:
                uow.emit("nudge", review_id, "nudge", body(review_id, reason, principal=principal))
    total = REVIEWS * len(SCRIPT)

    channel = grpc.aio.insecure_channel(own_stack.address("nudge"), options=CHANNEL_OPTIONS)
    relay = Relay(
        producer,
        {"nudge": ingest_method(channel, nudge_pb2.DESCRIPTOR.services_by_name["NudgeService"].full_name)},
        poll_interval_s=0.05,
        batch_size=10,
    )
    relay.start()
    try:
        # Kill the receiver mid-stream: some events delivered, most still in flight.
        while await undelivered(producer) > total - 15:  # noqa: ASYNC110 - the relay runs in another task
            await asyncio.sleep(0.005)
        own_stack.procs["nudge"].kill()
        own_stack.procs["nudge"].wait()
        in_flight = await undelivered(producer)
        assert 0 < in_flight < total

        own_stack.start("nudge")
        await own_stack.wait_serving(["nudge"])
        deadline = time.monotonic() + 60
        while await undelivered(producer) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        assert await undelivered(producer) == 0
    finally:
        await relay.stop()
        await channel.close()

    events = await all_events(api, agent)
    await api.http.aclose()
    per_review = {rid: [(e["reason"], e["seq"]) for e in events if e.get("review_id") == rid] for rid in ids}
    assert all(log == STORED for log in per_review.values()), per_review
    assert len(events) == REVIEWS * len(STORED)
    assert Counter(e["id"] for e in events).most_common(1)[0][1] == 1


@pytest.mark.microservices_only("SIGKILLs nudge alone while review_state's relay streams to it")
async def test_sigkill_while_review_states_relay_delivers_loses_and_doubles_nothing(own_stack: Stack) -> None:
    api = Api(own_stack)
    agent = await api.agent()
    ids = [
        (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
        for _ in range(REVIEWS // 2)
    ]

    async def cancel_then_hammer(review_id: str) -> None:
        for _ in range(2):  # the second cancel is a 409 terminal: a front_run_next nudge
            await api.http.post(f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent)

    producing = asyncio.gather(*(cancel_then_hammer(rid) for rid in ids))
    while not (await api.http.get("/v1/review-events", headers=agent)).json()["events"]:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    own_stack.procs["nudge"].kill()  # the relay is mid-stream: some nudges stored, the rest in flight
    own_stack.procs["nudge"].wait()
    await producing
    review_state = Database(make_engine(own_stack.settings.db_url("review_state")))
    try:
        assert await undelivered(review_state) > 0  # the receiver died with nudges still in flight
    finally:
        await review_state.dispose()
    own_stack.start("nudge")
    await own_stack.wait_serving(["nudge"])

    deadline = time.monotonic() + 60
    while len(await all_events(api, agent)) < 2 * len(ids) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    await asyncio.sleep(1)  # a straggling redelivery would land now, and show as a double
    events = await all_events(api, agent)
    await api.http.aclose()
    per_review = {rid: [(e["reason"], e["seq"]) for e in events if e.get("review_id") == rid] for rid in ids}
    assert all(log == [("cancelled", 1), ("front_run_next", 2)] for log in per_review.values()), per_review
    assert len(events) == 2 * len(ids)
