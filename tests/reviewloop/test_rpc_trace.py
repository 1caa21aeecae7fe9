"""A gRPC hop inside a sampled trace is one CLIENT and one SERVER span of that trace; a call outside any
trace, or a health check, records none."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from reviewloop import rpc_trace, telemetry
from reviewloop.service import Peers
from reviewloop.trust import Trust

from tests.reviewloop.test_trust import diff_service, get_diff, health

METHOD = "/reviewloop.diff.v1.DiffService/GetDiff"


async def both_ends(exporter: InMemorySpanExporter) -> dict[SpanKind, Any]:
    """The hop's finished spans by kind, once both have ended (up to 2 s): the server ends its span just
    after its answer goes out, so the caller can hold the answer first."""
    for _ in range(200):
        spans = {s.kind: s for s in exporter.get_finished_spans() if s.name == METHOD}
        if len(spans) == 2:
            break
        await asyncio.sleep(0.01)
    return spans


async def test_a_hop_is_one_client_and_one_server_span_of_the_callers_trace_and_only_when_sampled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=telemetry.SAMPLER)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(rpc_trace, "_tracer", provider.get_tracer("rpc"))
    async with diff_service(tmp_path, Trust()) as (_running, listen):
        peers = Peers({"diff": listen})
        try:
            channel = peers.channel("diff")
            # Outside any trace (an idle relay's poll) and a health probe: nothing recorded anywhere.
            assert await get_diff(channel) is grpc.StatusCode.NOT_FOUND
            assert await health(channel) == 1
            assert exporter.get_finished_spans() == ()

            with provider.get_tracer("gateway").start_as_current_span("POST /v1/x") as request:
                assert await get_diff(channel) is grpc.StatusCode.NOT_FOUND
            spans = await both_ends(exporter)
        finally:
            await peers.close()
    client, server = spans[SpanKind.CLIENT], spans[SpanKind.SERVER]
    assert client.context is not None and server.context is not None and server.parent is not None
    assert client.parent is not None and client.parent.span_id == request.get_span_context().span_id
    assert server.parent.span_id == client.context.span_id
    assert {client.context.trace_id, server.context.trace_id} == {request.get_span_context().trace_id}
    # The refusal is ERROR on both sides, with the status code; the server's names the problem code.
    assert client.status.status_code is StatusCode.ERROR and server.status.status_code is StatusCode.ERROR
    assert client.attributes is not None and server.attributes is not None
    assert client.attributes["rpc.grpc.status_code"] == server.attributes["rpc.grpc.status_code"] == 5
    assert server.attributes["problem_code"] == "not_found"
    assert server.attributes["reviewloop.review_id"] == "rr_x"
    assert len(exporter.get_finished_spans()) == 3  # the request's, the client's and the server's


async def test_a_server_stream_carries_the_callers_trace() -> None:
    # A channel files each interceptor under one call kind only; nudge's Subscribe went out untraced.
    seen: list[str] = []

    async def stream(_request: bytes, context: grpc.aio.ServicerContext) -> Any:
        seen.extend(value for key, value in context.invocation_metadata() or () if key == "traceparent")
        yield b"one"

    handler = grpc.method_handlers_generic_handler(
        "test.Streams", {"Read": grpc.unary_stream_rpc_method_handler(stream)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    peers = Peers({"streams": f"127.0.0.1:{port}"})
    try:
        provider = TracerProvider(sampler=telemetry.SAMPLER)
        with provider.get_tracer("gateway").start_as_current_span("GET /v1/review-events/stream") as request:
            call = peers.channel("streams").unary_stream("/test.Streams/Read")(b"")
            assert [message async for message in call] == [b"one"]
    finally:
        await peers.close()
        await server.stop(None)
    trace_id = format(request.get_span_context().trace_id, "032x")
    assert len(seen) == 1 and seen[0].split("-")[1] == trace_id
