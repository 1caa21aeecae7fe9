"""One call between contexts in monolithic mode (issue 39), three ways, in one process and one event loop.

As ``reviewloop up --target all`` runs the parts, 16 callers at once:

- grpc.aio: a server and a channel over a Unix socket in the same process (monolithic mode before the
  in-process channel; ``REVIEWLOOP_INPROCESS=0`` still runs it so);
- in-process channel: ``reviewloop.inproc`` as monolithic mode uses it, through a ``Peers`` with a
  ``LocalServer``: serialized both ways, the same client interceptors (tracing) and the same
  ``BoundaryInterceptor`` as the grpc.aio row's, the handler in a task of its own;
- direct: the floor of a call, serialize the request, parse it, await the servicer, serialize and parse
  the answer, with no interceptor and no task.

The servicer is the health check's (a small message each way; a review's messages are larger, which adds
the same protobuf work to every row). CPU is the whole process's (every thread) per call, from
getrusage, over ``ROUNDS`` rounds of ``PER_ROUND`` calls.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from reviewloop.boundary import BoundaryInterceptor
from reviewloop.inproc import LocalServer
from reviewloop.service import Peers

CALLERS = 16
ROUNDS = int(os.environ.get("BENCH_UNIT_ROUNDS", "7"))
PER_ROUND = 1600


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _rounds(call: Callable[[], Awaitable[Any]]) -> list[float]:
    """CPU seconds per call, one sample a round."""

    async def caller(units: int) -> None:
        for _ in range(units):
            await call()

    samples = []
    for _ in range(ROUNDS):
        before = _cpu()
        await asyncio.gather(*(caller(PER_ROUND // CALLERS) for _ in range(CALLERS)))
        samples.append((_cpu() - before) / PER_ROUND)
    return samples


async def _three() -> tuple[list[float], list[float], list[float]]:
    servicer = health_aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    request = health_pb2.HealthCheckRequest(service="")
    with tempfile.TemporaryDirectory() as tmp:
        address = f"unix:{Path(tmp) / 'unit.sock'}"
        server = grpc.aio.server(interceptors=[BoundaryInterceptor()])
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        server.add_insecure_port(address)
        await server.start()
        peers = Peers({"unit": address})
        try:
            stub: Any = health_pb2_grpc.HealthStub(peers.channel("unit"))
            await stub.Check(request)
            over_grpc = await _rounds(lambda: stub.Check(request))
        finally:
            await peers.close()
            await server.stop(None)

    local = LocalServer(BoundaryInterceptor())
    health_pb2_grpc.add_HealthServicer_to_server(servicer, local)  # type: ignore[arg-type]  # a server look-alike
    peers = Peers({"unit": "unix:unused"}, local={"unit": local})
    stub = health_pb2_grpc.HealthStub(peers.channel("unit"))
    await stub.Check(request)
    in_process = await _rounds(lambda: stub.Check(request))
    await peers.close()

    async def direct() -> health_pb2.HealthCheckResponse:
        received = health_pb2.HealthCheckRequest.FromString(request.SerializeToString())
        answer = await servicer.Check(received, None)  # type: ignore[arg-type]  # no context needed here
        return health_pb2.HealthCheckResponse.FromString(answer.SerializeToString())

    return over_grpc, in_process, await _rounds(direct)


async def run() -> list[tuple[str, list[float], str]]:
    started = time.monotonic()
    over_grpc, in_process, direct = await _three()
    elapsed = time.monotonic() - started
    median = statistics.median
    return [
        ("one process: grpc.aio unary over a Unix socket, CPU a call", over_grpc, f"{CALLERS} callers"),
        (
            "one process: in-process channel (reviewloop.inproc), CPU a call",
            in_process,
            f"grpc.aio costs {median(over_grpc) / median(in_process):.1f}x this",
        ),
        (
            "one process: direct call (serialize, servicer, deserialize), CPU a call",
            direct,
            f"the channel costs {median(in_process) / median(direct):.1f}x this ({elapsed:.0f} s)",
        ),
    ]
