"""Stream fan-out (issue 19): 100 open ``/v1/review-events/stream`` connections of one project on a real
stack; each publish (an Ingest, as review_state's relay does it) is timed until every stream has it. The
floor, measured on the same stack in the same run, is the same publish to one open stream: the gateway
shares one read of the nudge service among a project's streams, so the fan-out should cost little more."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import grpc
import httpx
import orjson
from reviewloop.common.v1 import common_pb2
from reviewloop.ids import new_id
from reviewloop.nudge.v1 import nudge_pb2_grpc
from reviewloop.tenancy import ActorKind, Principal
from stack.launcher import Stack
from stack.topology import GATEWAY

from tests.conftest import PG_ENV, Api, Databases, start_stack
from tests.nudge.factory import event

STREAMS, PUBLISHES = 100, 30


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _publish_to_receive(api: Api, http: httpx.AsyncClient, stack: Stack, streams: int) -> list[float]:
    """Seconds from each publish until each of ``streams`` open streams of one new project has it."""
    arrivals: defaultdict[str, list[float]] = defaultdict(list)
    opened = 0
    all_open, everywhere = asyncio.Event(), asyncio.Event()
    project = await api.project()
    key = await api.key(project["project_id"])
    principal = Principal(key["org_id"], key["project_id"], ActorKind.AGENT, key["agent_id"])
    headers = api.auth(key["api_key"])

    async def reader() -> None:
        nonlocal opened
        async with http.stream("GET", "/v1/review-events/stream", headers=headers) as stream:
            opened += 1
            if opened == streams:
                all_open.set()
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    review_id = orjson.loads(line[6:]).get("review_id", "")
                    arrivals[review_id].append(time.perf_counter())
                    if len(arrivals[review_id]) == streams:
                        everywhere.set()

    readers = [asyncio.create_task(reader()) for _ in range(streams)]
    samples: list[float] = []
    try:
        await asyncio.wait_for(all_open.wait(), 60)
        await asyncio.sleep(1.0)  # every stream joined its project's feed
        async with grpc.aio.insecure_channel(stack.address("nudge")) as channel:
            nudge = nudge_pb2_grpc.NudgeServiceStub(channel)
            for _ in range(PUBLISHES):
                review_id = new_id("rr")
                everywhere.clear()
                started = time.perf_counter()
                await nudge.Ingest(
                    common_pb2.IngestRequest(events=[event(review_id, "rejected", principal=principal)])
                )
                await asyncio.wait_for(everywhere.wait(), 60)
                samples += [arrived - started for arrived in arrivals[review_id]]
    finally:
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    return samples


async def _fanout(backend: str) -> list[tuple[str, list[float], str]]:
    """The floor (one open stream) and the fan-out (``STREAMS`` of one project), on one stack in one run."""
    with tempfile.TemporaryDirectory() as tmp:
        databases = Databases(Path(tmp))
        # One key holds all the streams here: the fan-out is measured, not the caps (issue 36), so none.
        uncapped = {"REVIEWLOOP_STREAMS_PER_KEY": "0", "REVIEWLOOP_STREAMS_PER_PROJECT": "0"}
        stack = await start_stack(databases, backend, Path(tmp), uncapped)
        api = Api(stack)
        http = httpx.AsyncClient(
            base_url=f"http://{stack.address(GATEWAY)}",
            timeout=60,
            limits=httpx.Limits(max_connections=STREAMS + 10),
        )
        try:
            floor = await _publish_to_receive(api, http, stack, 1)
            fanout = await _publish_to_receive(api, http, stack, STREAMS)
        finally:
            await http.aclose()
            await api.http.aclose()
            stack.stop_all()
            await databases.drop_all()
    return [
        (f"stream floor x1 ({backend})", floor, f"one open stream; p99 {p99(floor) * 1e3:.1f} ms"),
        (
            f"stream fan-out x{STREAMS} ({backend})",
            fanout,
            f"publish to receive on every stream; p99 {p99(fanout) * 1e3:.1f} ms "
            f"({p99(fanout) / p99(floor):.1f}x the floor's); {PUBLISHES} publishes",
        ),
    ]


async def run() -> list[tuple[str, list[float], str]]:
    """SQLite always; PostgreSQL too when REVIEWLOOP_TEST_POSTGRES names a server."""
    rows = await _fanout("sqlite")
    if os.environ.get(PG_ENV):
        rows += await _fanout("postgres")
    return rows
