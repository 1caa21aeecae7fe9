"""Is an in-process channel worth building for monolithic mode (issue 39)? One call between contexts, two ways.

Both in one process and one event loop, as ``reviewloop up --target all`` runs the parts, 16 callers at once:

- grpc.aio: a server and a channel over a Unix socket in the same process (what monolithic mode does now);
- in-process: what a grpc-like callable would do instead, with no HTTP/2 and no gRPC C core: serialize the
  request, deserialize it, await the servicer's method, serialize the answer, deserialize it.

The servicer is the health check's (a small message each way; a review's messages are larger, which adds
the same protobuf work to both). CPU is the whole process's (every thread) per call, from getrusage, over
``ROUNDS`` rounds of ``PER_ROUND`` calls; the row's note gives the medians' ratio.
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


async def _both() -> tuple[list[float], list[float]]:
    servicer = health_aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    request = health_pb2.HealthCheckRequest(service="")
    with tempfile.TemporaryDirectory() as tmp:
        address = f"unix:{Path(tmp) / 'unit.sock'}"
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        server.add_insecure_port(address)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub: Any = health_pb2_grpc.HealthStub(channel)
                await stub.Check(request)
                over_grpc = await _rounds(lambda: stub.Check(request))
        finally:
            await server.stop(None)

    async def in_process() -> health_pb2.HealthCheckResponse:
        received = health_pb2.HealthCheckRequest.FromString(request.SerializeToString())
        answer = await servicer.Check(received, None)  # type: ignore[arg-type]  # no context needed here
        return health_pb2.HealthCheckResponse.FromString(answer.SerializeToString())

    return over_grpc, await _rounds(in_process)


async def run() -> list[tuple[str, list[float], str]]:
    started = time.monotonic()
    over_grpc, in_process = await _both()
    ratio = statistics.median(over_grpc) / statistics.median(in_process)
    elapsed = time.monotonic() - started
    return [
        ("one process: grpc.aio unary over a Unix socket, CPU a call", over_grpc, f"{CALLERS} callers"),
        (
            "one process: in-process call (serialize, servicer, deserialize), CPU a call",
            in_process,
            f"grpc.aio costs {ratio:.0f}x ({elapsed:.0f} s)",
        ),
    ]
