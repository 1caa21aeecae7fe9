"""The outbox relay across real processes: a receiver that is down loses nothing and reorders nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from reviewloop.common.v1 import common_pb2
from reviewloop.nudge.v1 import nudge_pb2_grpc
from reviewloop.review.v1.events_pb2 import NudgeRequested
from reviewloop.storage.codec import encode
from stack.launcher import Stack

from tests.conftest import Api, Databases, draft, start_stack
from tests.e2e.helpers import events_until


@pytest.fixture
async def own_stack(databases: Databases, backend: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack of this test's own, since the test stops and restarts one of its services."""
    running = await start_stack(databases, backend, tmp_path)
    yield running
    running.stop_all()


@pytest.mark.microservices_only("stops nudge alone while review_state writes")
async def test_nudges_written_while_nudge_is_down_arrive_once_in_order(own_stack: Stack) -> None:
    api = Api(own_stack)
    agent = await api.agent()
    ids = [
        (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
        for _ in range(3)
    ]

    own_stack.stop("nudge")
    for review_id in ids:
        cancelled = await api.http.post(
            f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
        )
        assert cancelled.status_code == 200, cancelled.text
    unavailable = await api.http.get("/v1/review-events", headers=agent)
    assert unavailable.status_code == 503 and unavailable.json()["code"] == "unavailable"
    assert unavailable.headers["retry-after"]

    own_stack.start("nudge")
    await own_stack.wait_serving(["nudge"])
    events = await events_until(api, agent, 3)
    await api.http.aclose()
    assert [(e["review_id"], e["reason"], e["seq"]) for e in events] == [(rid, "cancelled", 1) for rid in ids]


async def test_a_redelivered_event_is_stored_once(stack: Stack) -> None:
    api = Api(stack)
    project = await api.project()
    key = await api.key(project["project_id"])
    event = common_pb2.Event(
        event_id="evt_01JREDELIVERED0000000000" + str(len(key["agent_id"]) % 10),
        aggregate_id="rr_01JREDELIVEREDREVIEW00000",
        type="nudge",
        payload=encode(
            NudgeRequested(
                review_id="rr_01JREDELIVEREDREVIEW00000",
                org_id=key["org_id"],
                project_id=key["project_id"],
                agent_id=key["agent_id"],
                category_id="",
                rejected=NudgeRequested.Rejected(revision=1, feedback="too long", by="human"),
            )
        ).encode(),
    )
    async with grpc.aio.insecure_channel(stack.address("nudge")) as channel:
        stub = nudge_pb2_grpc.NudgeServiceStub(channel)
        first = await stub.Ingest(common_pb2.IngestRequest(events=[event]))
        second = await stub.Ingest(common_pb2.IngestRequest(events=[event, event]))
    assert (first.accepted, first.duplicates) == (1, 0)
    assert (second.accepted, second.duplicates) == (0, 2)
    events = await events_until(api, api.auth(key["api_key"]), 1)
    await api.http.aclose()
    assert [(e["reason"], e["seq"]) for e in events] == [("rejected", 1)]
