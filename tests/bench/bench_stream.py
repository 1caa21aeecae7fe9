"""Stream fan-out (issue 19): 100 open ``/v1/review-events/stream`` connections of one project on a real
stack; each publish (an Ingest, as review_state's relay does it) is timed until every stream has it."""

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
from stack.topology import GATEWAY

from tests.conftest import PG_ENV, Api, Databases, start_stack
from tests.nudge.factory import event

STREAMS, PUBLISHES = 100, 30


async def _fanout(backend: str) -> list[tuple[str, list[float], str]]:
    with tempfile.TemporaryDirectory() as tmp:
        databases = Databases(Path(tmp))
        stack = await start_stack(databases, backend, Path(tmp))
        api = Api(stack)
        http = httpx.AsyncClient(
            base_url=f"http://{stack.address(GATEWAY)}",
            timeout=60,
            limits=httpx.Limits(max_connections=STREAMS + 10),
        )
        arrivals: defaultdict[str, list[float]] = defaultdict(list)
        opened = 0
        all_open, everywhere = asyncio.Event(), asyncio.Event()
        readers: list[asyncio.Task[None]] = []
        try:
            project = await api.project()
            key = await api.key(project["project_id"])
            principal = Principal(key["org_id"], key["project_id"], ActorKind.AGENT, key["agent_id"])
            headers = api.auth(key["api_key"])

            async def reader() -> None:
                nonlocal opened
                async with http.stream("GET", "/v1/review-events/stream", headers=headers) as stream:
                    opened += 1
                    if opened == STREAMS:
                        all_open.set()
                    async for line in stream.aiter_lines():
                        if line.startswith("data: "):
                            review_id = orjson.loads(line[6:])["review_id"]
                            arrivals[review_id].append(time.perf_counter())
                            if len(arrivals[review_id]) == STREAMS:
                                everywhere.set()

            readers = [asyncio.create_task(reader()) for _ in range(STREAMS)]
            await asyncio.wait_for(all_open.wait(), 60)
            await asyncio.sleep(1.0)  # every Subscribe parked on the doorbell
            samples: list[float] = []
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
            await http.aclose()
            await api.http.aclose()
            stack.stop_all()
            await databases.drop_all()
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return [
        (
            f"stream fan-out x{STREAMS} ({backend})",
            samples,
            f"publish to receive on every stream; p99 {p99 * 1e3:.1f} ms; {PUBLISHES} publishes",
        )
    ]


async def run() -> list[tuple[str, list[float], str]]:
    """SQLite always; PostgreSQL too when REVIEWLOOP_TEST_POSTGRES names a server."""
    rows = await _fanout("sqlite")
    if os.environ.get(PG_ENV):
        rows += await _fanout("postgres")
    return rows
