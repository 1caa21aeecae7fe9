"""The spans of gRPC calls, only inside a trace (sampled, or recorded in case it fails).

One CLIENT span per call made and one SERVER span per call served, and the W3C ``traceparent`` on
every call, so a review's trace stays whole across hops. OpenTelemetry's own gRPC instrumentation built both spans (and their attribute sets) on every call,
sampled or not; here a call outside a sampled trace costs a ``traceparent`` and nothing else.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
from opentelemetry import context, propagate, trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from reviewloop.telemetry import IDLE

STATUS_CODE = "rpc.grpc.status_code"
_tracer = trace.get_tracer("reviewloop.rpc")


def _attributes(method: str) -> dict[str, Any]:
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


def _unsampled_root() -> Any:
    """A context naming a fresh trace that is not sampled, and idle (``telemetry.IDLE``).

    A call made outside any trace (an idle relay or sweep polling) tells its server so, and the server
    records nothing either (a request's unsampled trace it records, in case it fails).
    """
    span_context = SpanContext(
        random.getrandbits(128), random.getrandbits(64), False, TraceFlags(0), TraceState([IDLE])
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def client_tracing() -> list[Any]:
    """The interceptors that carry the caller's trace on every call, unary and server-streaming.

    One per call kind: a grpc.aio channel files each interceptor under the first kind it is an instance
    of, so one object that was both traced only unary calls, and a server stream (nudge's Subscribe)
    went out without the caller's trace.
    """
    return [_TraceUnary(), _TraceStream()]


class _ClientTracing:
    """Carry the caller's trace on a call; a CLIENT span only when the caller's span is sampled."""

    def _start(
        self, details: grpc.aio.ClientCallDetails
    ) -> tuple[trace.Span | None, grpc.aio.ClientCallDetails]:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        current = trace.get_current_span()
        span = None
        if current.is_recording():
            span = _tracer.start_span(method, kind=SpanKind.CLIENT, attributes=_attributes(method))
            carried = trace.set_span_in_context(span)
        elif current.get_span_context().is_valid:
            carried = context.get_current()
        else:
            carried = _unsampled_root()
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=carried)
        metadata = grpc.aio.Metadata(*(details.metadata or ()), *carrier.items())
        return span, grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _TraceUnary(_ClientTracing, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        """A unary call: its span ends with the call, ERROR with the status code unless OK."""
        span, details = self._start(details)
        if span is None:
            return await continuation(details, request)
        code = grpc.StatusCode.UNKNOWN
        try:
            call = await continuation(details, request)
            code = await call.code()
            return call
        except grpc.aio.AioRpcError as error:
            code = error.code()
            raise
        finally:
            span.set_attribute(STATUS_CODE, code.value[0])
            if code is not grpc.StatusCode.OK:
                span.set_status(Status(StatusCode.ERROR, code.name))
            span.end()


class _TraceStream(_ClientTracing, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        """A server-streaming call: its span ends when the stream does."""
        span, details = self._start(details)
        call = await continuation(details, request)
        if span is not None:
            call.add_done_callback(lambda _call: span.end())
        return call


@contextmanager
def served(method: str, metadata: Any) -> Iterator[trace.Span]:
    """The SERVER span of a call served, current while it runs, continuing the caller's trace.

    An idle caller (outside any trace) gets none: its unsampled context is made current, so nothing the
    call does starts a trace of its own. A caller's unsampled trace gets a recorded span, exported only
    if the trace fails here (``telemetry.KeepErrors``). A call without a ``traceparent`` (a client that
    is not a reviewloop service) starts one as any request does.
    """
    parent = propagate.extract({key: value for key, value in metadata or () if isinstance(value, str)})
    caller = trace.get_current_span(parent).get_span_context()
    if caller.is_valid and caller.trace_state.get(IDLE[0]) == IDLE[1]:
        token = context.attach(parent)
        try:
            yield trace.get_current_span(parent)
        finally:
            context.detach(token)
        return
    with _tracer.start_as_current_span(
        method,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=_attributes(method),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span
