"""What the shape's parts cost on this machine (issue 18): the units a lifecycle is made of, each alone.

A lifecycle is HTTP requests into the gateway, gRPC calls between processes and PostgreSQL statements
(docs/performance.md counts them from a lifecycle's trace). Here each unit runs with nothing of ours
around it, on loopback, 16 callers at once as in the lifecycle bench, and its server CPU (utime+stime of
the serving process, and of the PostgreSQL backends for a statement) and its caller's CPU are read from
/proc per unit. The sum of a lifecycle's units is the CPU this shape spends before any code of ours runs:

- an HTTP request: a uvicorn + FastAPI process answering a small JSON body (the route the floor's
  process also serves); the caller is the bench's own client, not counted;
- a gRPC unary call: a grpc.aio server answering the health check, called from a grpc.aio channel;
- a PostgreSQL statement: a one-row SELECT through asyncpg (prepared), one connection per caller; and
  the same statement as a service runs it, on a store of ``make_engine``: a SQLAlchemy connection in
  autocommit checked out of the pool and back per statement, the statement run on the driver below
  SQLAlchemy's execution layer (``reviewloop.storage.driver``);
- a span: started with three attributes, ended, and exported as the services do (batched, as JSON lines);
  and a span of a trace the ratio does not sample, as the services record it (held by ``KeepErrors``
  until its trace ends, then dropped) beside what it cost when such a span was not recorded at all.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, Sampler
from opentelemetry.util.types import Attributes
from reviewloop.storage import Database, make_engine
from reviewloop.telemetry import SAMPLER, JsonLinesExporter, KeepErrors, TelemetrySettings, sampler
from sqlalchemy import Text, bindparam, cast, func, select
from stack.launcher import free_port

from tests.bench.bench_lifecycle import cpu_s
from tests.bench.client import Client
from tests.conftest import PG_ENV

CALLERS = 16
ROUNDS = int(os.environ.get("BENCH_UNIT_ROUNDS", "7"))
# Units a round, shared by the callers: enough for ~0.3 s of CPU, as /proc counts in 10 ms ticks.
PER_ROUND = 1600

_HTTP_APP = """
import sys, uvicorn
from fastapi import FastAPI
from starlette.responses import Response
app = FastAPI()
@app.get("/unit")
async def unit() -> Response:
    return Response(b'{"review_id":"rev_0","state":"pending","revision":1,"version":1}', media_type="application/json")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""

_GRPC_SERVER = """
import asyncio, sys, grpc
from grpc_health.v1 import health_pb2_grpc
from grpc_health.v1.health import aio
async def main():
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(aio.HealthServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
    await server.start()
    await server.wait_for_termination()
import uvloop; uvloop.run(main())
"""


async def _rounds(
    call: Callable[[int, int], Awaitable[None]], server_pids: list[int], per_round: int = PER_ROUND
) -> tuple[list[float], list[float]]:
    """Per round: the servers' and the caller's CPU seconds per unit, ``CALLERS`` callers at once, each
    ``call(caller, units)``."""
    server, caller = [], []
    await asyncio.gather(*(call(i, per_round // CALLERS // 4) for i in range(CALLERS)))  # warm
    for _ in range(ROUNDS):
        before, mine = cpu_s(server_pids), time.process_time()
        await asyncio.gather(*(call(i, per_round // CALLERS) for i in range(CALLERS)))
        after = cpu_s(server_pids)
        server.append(sum(after[p] - before.get(p, 0.0) for p in after) / per_round)
        caller.append((time.process_time() - mine) / per_round)
    return server, caller


def _serve(source: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", source, str(port)])


async def _http() -> list[float]:
    port = free_port()
    proc = _serve(_HTTP_APP, port)
    try:
        async with Client(f"http://127.0.0.1:{port}", max_connections=CALLERS) as http:
            for _ in range(100):
                try:
                    await http.get("/unit")
                    break
                except OSError:
                    await asyncio.sleep(0.1)

            async def call(_i: int, units: int) -> None:
                for _ in range(units):
                    assert (await http.get("/unit")).status_code == 200

            server, _ = await _rounds(call, [proc.pid])
    finally:
        proc.terminate()
        proc.wait(10)
    return server


async def _grpc() -> tuple[list[float], list[float]]:
    port = free_port()
    proc = _serve(_GRPC_SERVER, port)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            stub: Any = health_pb2_grpc.HealthStub(channel)  # the stubs' types declare no methods
            request = health_pb2.HealthCheckRequest()

            async def call(_i: int, units: int) -> None:
                for _ in range(units):
                    await stub.Check(request)

            return await _rounds(call, [proc.pid])
    finally:
        proc.terminate()
        proc.wait(10)


def _dsn() -> str:
    return os.environ.get(PG_ENV, "postgresql://postgres@127.0.0.1:5432/postgres")


async def _statement() -> tuple[list[float], list[float]]:
    conns = [await asyncpg.connect(_dsn()) for _ in range(CALLERS)]
    try:
        backends = [await c.fetchval("SELECT pg_backend_pid()") for c in conns]
        prepared = [await c.prepare("SELECT $1::text AS id, now() AS at") for c in conns]

        async def call(i: int, units: int) -> None:
            for _ in range(units):
                await prepared[i].fetch("rev_0")

        return await _rounds(call, backends, 8 * PER_ROUND)
    finally:
        for c in conns:
            await c.close()


_SELECT = select(cast(bindparam("id"), Text).label("id"), func.now().label("at"))


async def _sqlalchemy() -> list[float]:
    db = Database(make_engine(_dsn().replace("postgresql://", "postgresql+asyncpg://"), pool_size=CALLERS))
    try:

        async def call(_i: int, units: int) -> None:
            for _ in range(units):
                async with db.single_statement.connect() as conn:
                    (await conn.execute(_SELECT, {"id": "rev_0"})).all()

        _, caller = await _rounds(call, [], 4 * PER_ROUND)
    finally:
        await db.dispose()
    return caller


def _spans(directory: str, sampled_by: Sampler) -> list[float]:
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}), sampler=sampled_by)
    exporter = JsonLinesExporter(Path(directory) / "traces.jsonl")
    provider.add_span_processor(KeepErrors(BatchSpanProcessor(exporter, schedule_delay_millis=200)))
    tracer = provider.get_tracer("bench")
    attributes: Attributes = {
        "rpc.method": "Submit",
        "reviewloop.review_id": "rev_0",
        "rpc.grpc.status_code": 0,
    }
    samples = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(4 * PER_ROUND):
            tracer.start_span("unit", attributes=attributes).end()
        provider.force_flush()
        samples.append((time.process_time() - started) / (4 * PER_ROUND))
    provider.shutdown()
    return samples


async def run() -> list[tuple[str, list[float], str]]:
    http = await _http()
    grpc_server, grpc_client = await _grpc()
    backend, driver = await _statement()
    through_sqlalchemy = await _sqlalchemy()
    with tempfile.TemporaryDirectory() as directory:
        spans = _spans(directory, SAMPLER)
        recorded = _spans(
            directory, sampler(TelemetrySettings.from_env({"OTEL_TRACES_SAMPLER": "always_off"}))
        )
        dropped = _spans(directory, ALWAYS_OFF)
    per = f"CPU a unit, {CALLERS} callers"
    return [
        ("unit: HTTP request, uvicorn + FastAPI server", http, per),
        ("unit: gRPC unary call, server", grpc_server, per),
        ("unit: gRPC unary call, caller", grpc_client, per),
        ("unit: PostgreSQL statement, backend", backend, per),
        ("unit: PostgreSQL statement, asyncpg caller", driver, per),
        ("unit: PostgreSQL statement, SQLAlchemy caller", through_sqlalchemy, f"{per}; checkout + execute"),
        ("unit: span, started, ended and exported", spans, "CPU a span"),
        ("unit: span, unsampled: recorded, held, dropped", recorded, "CPU a span"),
        ("unit: span, unsampled and not recorded", dropped, "CPU a span"),
    ]
