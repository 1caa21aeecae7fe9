"""The in-process channel of monolithic mode answers as a grpc.aio channel does, for what the contexts use.

Each test runs twice against the same started service (diff, with a test servicer beside it): once over
its gRPC socket, once through ``InProcessChannel``: rich error details, service tokens, one trace across
the hop, deadlines, cancellation, server streams, a stopped service.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from diff.__main__ import SPEC as DIFF
from grpc_health.v1 import health_pb2
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from reviewloop import rpc_trace, telemetry
from reviewloop.config import ServiceConfig
from reviewloop.errors import Code
from reviewloop.inproc import InProcessChannel, LocalServer
from reviewloop.rpc_errors import from_rpc_error
from reviewloop.service import Peers, RunningService, start
from reviewloop.trust import Trust

from tests.reviewloop.test_trust import GET, KEY, get_diff

Message = health_pb2.HealthCheckRequest
Answer = health_pb2.HealthCheckResponse


class Slow:
    """A servicer whose calls wait until cancelled (each end is recorded) and a stream that counts."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled: list[str] = []

    async def wait(self, request: Any, context: Any) -> Any:
        self.started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled.append(request.service)
            raise
        return Answer()

    async def count(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            for status in (1, 2, 3):
                yield Answer(status=status)
            self.started.set()
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled.append(request.service)
            raise


def _add_slow(servicer: Slow, server: Any) -> None:
    handlers = {
        "Wait": grpc.unary_unary_rpc_method_handler(
            servicer.wait,
            request_deserializer=Message.FromString,
            response_serializer=Answer.SerializeToString,
        ),
        "Count": grpc.unary_stream_rpc_method_handler(
            servicer.count,
            request_deserializer=Message.FromString,
            response_serializer=Answer.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Slow", handlers),))


@dataclasses.dataclass
class Ends:
    running: RunningService
    slow: Slow
    listen: str
    local: dict[str, LocalServer] | None

    def peers(self, trust: Trust | None = None) -> Peers:
        return Peers({"diff": self.listen}, trust, self.local)

    def wait(self, peers: Peers) -> Any:
        return peers.channel("diff").unary_unary(
            "/test.Slow/Wait",
            request_serializer=Message.SerializeToString,
            response_deserializer=Answer.FromString,
        )

    def count(self, peers: Peers) -> Any:
        return peers.channel("diff").unary_stream(
            "/test.Slow/Count",
            request_serializer=Message.SerializeToString,
            response_deserializer=Answer.FromString,
        )


@pytest.fixture(params=["grpc", "inproc"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def serving(kind: str, tmp_path: Path, trust: Trust | None = None) -> AsyncIterator[Ends]:
    slow = Slow()
    spec = dataclasses.replace(
        DIFF, servicers=lambda env: (*DIFF.servicers(env), (_add_slow, slow, "test.Slow"))
    )
    listen = f"unix:{tmp_path / 'diff.sock'}"
    config = ServiceConfig(
        service="diff",
        db_url=f"sqlite+aiosqlite:///{tmp_path / 'diff.db'}",
        listen=listen,
        peers={},
        trust=trust or Trust(),
    )
    local: dict[str, LocalServer] = {}
    running = await start(spec, config, local)
    try:
        yield Ends(running, slow, listen, local if kind == "inproc" else None)
    finally:
        await running.stop(grace=0)


async def test_the_channel_kind_follows_the_mode(tmp_path: Path, kind: str) -> None:
    async with serving(kind, tmp_path) as ends:
        peers = ends.peers()
        assert isinstance(peers.channel("diff"), InProcessChannel) is (kind == "inproc")
        await peers.close()


async def test_a_refusal_arrives_with_its_code_rich_details_and_contract_version(
    tmp_path: Path, kind: str
) -> None:
    from reviewloop.diff.v1 import diff_pb2_grpc

    async with serving(kind, tmp_path) as ends:
        peers = ends.peers()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await diff_pb2_grpc.DiffServiceStub(peers.channel("diff")).GetDiff(GET, timeout=5)
        await peers.close()
    error = caught.value
    assert error.code() is grpc.StatusCode.NOT_FOUND
    assert dict(error.trailing_metadata() or ()).get("x-contract-version")
    problem = from_rpc_error(error)
    assert problem.code is Code.NOT_FOUND and problem.detail == error.details()


async def test_a_service_key_refuses_an_unsigned_or_forged_caller(tmp_path: Path, kind: str) -> None:
    async with serving(kind, tmp_path, Trust("diff", KEY.encode())) as ends:
        for trust, code in (
            (None, grpc.StatusCode.UNAUTHENTICATED),
            (Trust("review_state", b"f" * 40), grpc.StatusCode.UNAUTHENTICATED),
            (Trust("review_state", KEY.encode()), grpc.StatusCode.NOT_FOUND),  # reaches the domain
        ):
            peers = ends.peers(trust)
            assert await get_diff(peers.channel("diff")) is code
            await peers.close()


async def test_a_hop_is_one_client_and_one_server_span_of_the_callers_trace(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=telemetry.SAMPLER)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(rpc_trace, "_tracer", provider.get_tracer("rpc"))
    async with serving(kind, tmp_path) as ends:
        peers = ends.peers()
        with provider.get_tracer("gateway").start_as_current_span("POST /v1/x") as request:
            assert await get_diff(peers.channel("diff")) is grpc.StatusCode.NOT_FOUND
        await peers.close()
    for _ in range(200):  # a server ends its span just after its answer leaves
        spans = {s.kind: s for s in exporter.get_finished_spans() if s.name.endswith("/GetDiff")}
        if len(spans) == 2:
            break
        await asyncio.sleep(0.01)
    client, server = spans[SpanKind.CLIENT], spans[SpanKind.SERVER]
    assert client.context is not None and server.parent is not None and server.context is not None
    assert server.parent.span_id == client.context.span_id
    assert {client.context.trace_id, server.context.trace_id} == {request.get_span_context().trace_id}
    assert server.attributes is not None and server.attributes["problem_code"] == "not_found"


async def test_a_deadline_cancels_the_handler_and_answers_deadline_exceeded(
    tmp_path: Path, kind: str
) -> None:
    async with serving(kind, tmp_path) as ends:
        peers = ends.peers()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await ends.wait(peers)(Message(service="late"), timeout=0.3)
        assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        for _ in range(200):
            if ends.slow.cancelled:
                break
            await asyncio.sleep(0.01)
        assert ends.slow.cancelled == ["late"]
        await peers.close()


async def test_a_cancelled_caller_cancels_the_handler(tmp_path: Path, kind: str) -> None:
    async with serving(kind, tmp_path) as ends:
        peers = ends.peers()

        async def call() -> Any:
            return await ends.wait(peers)(Message(service="gone"), timeout=30)

        caller = asyncio.create_task(call())
        await asyncio.wait_for(ends.slow.started.wait(), 5)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        for _ in range(200):
            if ends.slow.cancelled:
                break
            await asyncio.sleep(0.01)
        assert ends.slow.cancelled == ["gone"]
        await peers.close()


async def test_a_server_stream_answers_in_order_and_a_cancel_ends_its_handler(
    tmp_path: Path, kind: str
) -> None:
    async with serving(kind, tmp_path) as ends:
        peers = ends.peers()
        call = ends.count(peers)(Message(service="tail"))
        seen = []
        async for answer in call:
            seen.append(answer.status)
            if len(seen) == 3:
                break
        await asyncio.wait_for(ends.slow.started.wait(), 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call.read()
        for _ in range(200):
            if ends.slow.cancelled:
                break
            await asyncio.sleep(0.01)
        assert seen == [1, 2, 3] and ends.slow.cancelled == ["tail"]
        await peers.close()


async def test_a_stopped_service_answers_unavailable(tmp_path: Path, kind: str) -> None:
    async with serving(kind, tmp_path) as ends:
        peers = ends.peers()
        assert await get_diff(peers.channel("diff")) is grpc.StatusCode.NOT_FOUND
        await ends.running.stop(grace=0)
        assert await get_diff(peers.channel("diff")) is grpc.StatusCode.UNAVAILABLE
        await peers.close()


async def test_a_service_stopping_under_a_call_answers_its_callers_and_leaves_none_waiting(
    tmp_path: Path, kind: str
) -> None:
    async with serving(kind, tmp_path) as ends:
        peers = ends.peers()

        async def unary() -> Any:
            return await ends.wait(peers)(Message(service="unary"), timeout=30)

        async def stream() -> list[int]:
            return [answer.status async for answer in ends.count(peers)(Message(service="stream"))]

        calls = [asyncio.create_task(unary()), asyncio.create_task(stream())]
        await asyncio.wait_for(ends.slow.started.wait(), 5)
        await asyncio.sleep(0.1)
        await ends.running.stop(grace=0)
        done = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        await peers.close()
    for outcome in done:
        assert isinstance(outcome, grpc.aio.AioRpcError), outcome
        assert outcome.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
