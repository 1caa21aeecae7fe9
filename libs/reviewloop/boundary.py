"""The service boundary every gRPC call crosses: ``BoundaryInterceptor``.

Each call is a SERVER span of its caller's trace, is refused without a valid service token when the
process has a key, has its NUL strings refused, has a ``DomainError`` mapped to ``google.rpc.Status``
and anything else to a bare INTERNAL (never a traceback), is counted in the RPC metric, and answers
with ``x-contract-version``. ``reviewloop.service`` puts it in front of every servicer, on the gRPC
server and on the in-process one alike.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, cast

import grpc
from google.protobuf.message import Message
from grpc_status import rpc_status
from opentelemetry import trace

from reviewloop import metrics, telemetry
from reviewloop.contract import CONTRACT_VERSION
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.rpc_errors import grpc_code, to_status
from reviewloop.rpc_trace import STATUS_CODE, served
from reviewloop.storage.unavailable import store_unavailable
from reviewloop.trust import Trust, require_caller

log = logging.getLogger(__name__)

HEALTH_SERVICE = "grpc.health.v1.Health"
HEALTH_PREFIX = f"/{HEALTH_SERVICE}/"


def nul_field(message: Message, path: str = "") -> str | None:
    """The JSON-pointer path of the first string holding a NUL character, or None.

    PostgreSQL cannot store NUL in text, so every service refuses it at the door with a 400 rather than
    failing (500) at the first write; SQLite stores it, which would make the two backends disagree.
    """
    for descriptor, value in message.ListFields():
        where = f"{path}/{descriptor.name}"
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(item, Message):
                    found = nul_field(item, f"{where}/{key}")
                elif "\x00" in f"{key}{item}":
                    found = f"{where}/{key}"
                else:
                    found = None
                if found:
                    return found
            continue
        items = list(enumerate(value)) if descriptor.is_repeated else [(None, value)]
        for index, item in items:
            here = where if index is None else f"{where}/{index}"
            if isinstance(item, Message):
                if found := nul_field(item, here):
                    return found
            elif isinstance(item, str) and "\x00" in item:
                return here
    return None


def _refuse_nul(request: Any) -> None:
    if isinstance(request, Message) and (where := nul_field(request)):
        raise invalid(where, "must not contain a NUL character")


# Every answer carries the contract version, in trailing metadata: it rides the batch that ends the
# call, where initial metadata would cost a send of its own on every RPC.
VERSION_METADATA = (("x-contract-version", CONTRACT_VERSION),)


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


async def _fail(context: grpc.aio.ServicerContext[Any, Any], error: DomainError) -> NoReturn:
    # gRPC's instrumentation leaves a client error (NOT_FOUND, ABORTED...) UNSET; an SRE filters on ERROR.
    telemetry.mark_error(error.code.value, error.detail)
    status = rpc_status.to_status(to_status(error))
    await context.abort_with_status(
        _Status(status.code, status.details, (*status.trailing_metadata, *VERSION_METADATA))
    )


async def _unexpected(
    context: grpc.aio.ServicerContext[Any, Any], behavior: Any, outcome: _Outcome, exc: Exception
) -> NoReturn:
    """Answer anything but a DomainError: a store that did not answer is ``unavailable`` (retryable).

    Anything else is a bare INTERNAL, with no traceback sent to the caller.
    """
    if store_unavailable(exc):
        log.warning("store not answering in %s: %s: %s", behavior, type(exc).__name__, exc)
        away = DomainError(Code.UNAVAILABLE, "The service's store is not answering; retry shortly.")
        outcome.failed(away)
        await _fail(context, away)
    log.exception("unhandled error in %s", behavior)
    outcome.status, outcome.code = grpc.StatusCode.INTERNAL, "internal"
    telemetry.mark_error("internal")
    await context.abort(
        grpc.StatusCode.INTERNAL, "The service failed to handle the request.", VERSION_METADATA
    )


def _annotate(message: Any) -> None:
    """Put the review a request or answer names on the RPC's server span (the submit's from its answer)."""
    span = trace.get_current_span()
    if span.is_recording() and isinstance(message, Message):
        span.set_attributes(telemetry.review_attributes(message))


class _Outcome:
    """How one call ended, for its metric and its span: the gRPC status and the problem code."""

    def __init__(self, method: str) -> None:
        self.method, self.status, self.code = method, grpc.StatusCode.OK, ""
        self.started = time.perf_counter()

    def failed(self, error: DomainError) -> None:
        self.status, self.code = grpc_code(error), error.code.value

    def record(self) -> None:
        metrics.record_rpc(self.method, self.status.name, self.code, time.perf_counter() - self.started)
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute(STATUS_CODE, self.status.value[0])


def _span(method: str, metadata: Any) -> contextlib.AbstractContextManager[Any]:
    """The call's SERVER span (health checks, probed every few seconds, get none)."""
    if method.startswith(HEALTH_PREFIX):
        return contextlib.nullcontext()
    return served(method, metadata)


def _wrap_unary(
    method: str, trust: Trust, behavior: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        context.set_trailing_metadata(VERSION_METADATA)
        metadata = context.invocation_metadata()
        with _span(method, metadata):
            outcome = _Outcome(method)
            try:
                require_caller(trust, method, metadata)
                _annotate(request)
                _refuse_nul(request)
                response = await behavior(request, context)
                _annotate(response)
                return response
            except DomainError as error:
                outcome.failed(error)
                await _fail(context, error)
            except asyncio.CancelledError:
                outcome.status = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await _unexpected(context, behavior, outcome, exc)
            finally:
                outcome.record()

    return unary


def _wrap_stream(
    method: str, trust: Trust, behavior: Callable[..., AsyncIterator[Any]]
) -> Callable[..., AsyncIterator[Any]]:
    async def stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        context.set_trailing_metadata(VERSION_METADATA)
        metadata = context.invocation_metadata()
        with _span(method, metadata):
            outcome = _Outcome(method)
            try:
                require_caller(trust, method, metadata)
                _annotate(request)
                _refuse_nul(request)
                async for item in behavior(request, context):
                    yield item
            except DomainError as error:
                outcome.failed(error)
                await _fail(context, error)
            except asyncio.CancelledError:
                outcome.status = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await _unexpected(context, behavior, outcome, exc)
            finally:
                outcome.record()

    return stream


class BoundaryInterceptor(grpc.aio.ServerInterceptor):
    """Apply the service-boundary guarantees to every unary and server-streaming RPC.

    Each call is a SERVER span of its caller's trace (``rpc_trace.served``), a call without a valid
    service token is refused when ``trust`` has a key (``trust.require_caller``), NUL strings are
    refused, a DomainError is mapped to status + details, anything else becomes a bare INTERNAL with no
    traceback, and every answer carries ``x-contract-version``.

    A method's wrapped handler is built on its first call and reused (the registered servicers never
    change): a call then costs no handler lookup and no wrapper built.
    """

    def __init__(self, trust: Trust | None = None) -> None:
        self.trust = trust or Trust()
        self._wrapped: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """The method's wrapped handler.

        A client-streaming or bidi one (reflection) is left as it is, refused (None) when it needs a
        service token the call does not carry.
        """
        method = handler_call_details.method
        if wrapped := self._wrapped.get(method):
            return wrapped
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(
                _wrap_unary(method, self.trust, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        elif handler.unary_stream is not None:
            wrapped = grpc.unary_stream_rpc_method_handler(
                # grpc.aio runs async generators here; the stubs only know the sync server's type.
                _wrap_stream(
                    method, self.trust, cast(Callable[..., AsyncIterator[Any]], handler.unary_stream)
                ),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        else:
            try:
                require_caller(self.trust, method, handler_call_details.invocation_metadata)
            except DomainError:
                return None
            return handler
        self._wrapped[method] = wrapped
        return wrapped
