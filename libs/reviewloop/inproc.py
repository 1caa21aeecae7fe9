"""The in-process channel of monolithic mode: a call between two contexts of one process, no transport.

``reviewloop up --target all`` runs every part on one event loop. A call from one context to another
over grpc.aio (HTTP/2 over a Unix socket, gRPC's C core and its threads) cost ~494 us of CPU where the
servicer's own work is a few (issue 39). ``InProcessChannel`` is what ``grpc.aio.Channel`` is to the
generated stubs (``unary_unary``, ``unary_stream``, ``close``), so they work unchanged, and keeps what
the contexts rely on of a call:

- the request and the answer cross as protobuf bytes (serialized by the caller's stub, parsed by the
  servicer's handler, and back), so the contracts still guard every boundary;
- the caller's client interceptors (``rpc_trace.client_tracing``, the service-token signers) and the
  callee's ``BoundaryInterceptor`` (service auth, the SERVER span from the carried ``traceparent``,
  error mapping, ``x-contract-version``) run as they do over gRPC: a request is still one trace;
- a failure reaches the caller as ``grpc.aio.AioRpcError`` with its code, details and trailing
  metadata (``grpc-status-details-bin``: the ``google.rpc.Status`` that ``rpc_errors`` unpacks);
- the handler runs in a task of its own, in its service's context (``telemetry.current_part``), not the
  caller's: a cancelled caller cancels it, a deadline cancels it and answers DEADLINE_EXCEEDED, a
  service that stopped (or has not started) answers UNAVAILABLE, as a closed socket would.

mTLS has no transport to guard here; a service token, when configured, is still signed and checked.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections import namedtuple
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, cast

import grpc

log = logging.getLogger(__name__)

# What one call may carry each way, as the gRPC channels and servers of the services allow.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Answers of a server stream a slow reader may leave unread before the servicer waits (flow control).
STREAM_BUFFER = 64

_EMPTY = grpc.aio.Metadata()
_STOPPED = "the service stopped while it served the call"
_CallDetails = namedtuple("_CallDetails", ("method", "invocation_metadata"))


class _Context:
    """The part of ``grpc.aio.ServicerContext`` a servicer and the boundary interceptor use."""

    __slots__ = ("_deadline", "_metadata", "code", "details", "trailing")

    def __init__(self, metadata: tuple[Any, ...], deadline: float | None) -> None:
        self._metadata, self._deadline = metadata, deadline
        self.code, self.details = grpc.StatusCode.OK, ""
        self.trailing: tuple[Any, ...] = ()

    def invocation_metadata(self) -> tuple[Any, ...]:
        return self._metadata

    def set_trailing_metadata(self, metadata: Sequence[Any]) -> None:
        self.trailing = tuple(metadata)

    def trailing_metadata(self) -> tuple[Any, ...]:
        return self.trailing

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    def peer(self) -> str:
        return "inproc:"

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        self.code, self.details = code, details
        if trailing_metadata:
            self.trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    async def abort_with_status(self, status: grpc.Status) -> None:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def failure(self) -> grpc.aio.AioRpcError:
        return _error(self.code, self.details, self.trailing)

    def crashed(self, method: str) -> None:
        # A handler's exception that no interceptor mapped: grpc.aio's own answer, UNKNOWN.
        log.exception("unhandled error in %s (in process)", method)
        self.code, self.details = grpc.StatusCode.UNKNOWN, "Unexpected error in the servicer."


def _error(code: grpc.StatusCode, details: str, trailing: Sequence[Any] = ()) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, _EMPTY, grpc.aio.Metadata(*trailing), details)


def _sized(payload: bytes, what: str) -> bytes:
    if len(payload) > MAX_MESSAGE_BYTES:
        raise _error(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{what} larger than max ({len(payload)} vs. {MAX_MESSAGE_BYTES})",
        )
    return payload


class LocalServer:
    """One service's servicers, answering callers in its own process.

    ``add_XServicer_to_server`` registers into it as into a ``grpc.aio.Server``; each method's handler is
    wrapped once by ``interceptor`` (the service's ``BoundaryInterceptor``). Built inside the service's
    context, whose copy each call's task runs in.
    """

    def __init__(self, interceptor: grpc.aio.ServerInterceptor) -> None:
        self._interceptor = interceptor
        self._methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        self._generic: list[grpc.GenericRpcHandler] = []
        self._context = contextvars.copy_context()
        self._calls: set[asyncio.Task[Any]] = set()
        self.serving = True

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        """What ``add_XServicer_to_server`` calls: the methods of ``service`` by their full names."""
        for name, handler in handlers.items():
            self._methods[f"/{service}/{name}"] = handler

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        """What a servicer without registered methods (reflection, older stubs) calls."""
        self._generic.extend(handlers)

    async def handler(self, method: str, metadata: tuple[Any, ...]) -> grpc.RpcMethodHandler[Any, Any] | None:
        """The intercepted handler of ``method``, None when the service has no such method."""

        async def registered(details: Any) -> grpc.RpcMethodHandler[Any, Any] | None:
            if (found := self._methods.get(details.method)) is not None:
                return found
            for generic in self._generic:
                if (found := generic.service(details)) is not None:
                    return found
            return None

        details = cast(grpc.HandlerCallDetails, _CallDetails(method, metadata))
        return await self._interceptor.intercept_service(registered, details)

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run one call's handler in a task of its own, in the service's context."""
        task = asyncio.get_running_loop().create_task(work, context=self._context.copy())
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return task

    async def stop(self, grace: float | None) -> None:
        """Refuse new calls (UNAVAILABLE), give those under way ``grace`` seconds, then cancel them."""
        self.serving = False
        if self._calls and grace:
            await asyncio.wait(set(self._calls), timeout=grace)
        for task in list(self._calls):
            task.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)


class InProcessChannel:
    """A ``grpc.aio.Channel`` look-alike whose calls go to ``server()`` (None: not serving) in this process."""

    def __init__(
        self, target: str, server: Callable[[], LocalServer | None], interceptors: Sequence[Any]
    ) -> None:
        self.target = target
        self._server = server
        self._unary = [i for i in interceptors if isinstance(i, grpc.aio.UnaryUnaryClientInterceptor)]
        self._stream = [i for i in interceptors if isinstance(i, grpc.aio.UnaryStreamClientInterceptor)]
        self._calls: set[asyncio.Task[Any]] = set()

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **_: Any,
    ) -> Callable[..., Awaitable[Any]]:
        """A unary method's callable: ``await it(request, timeout=, metadata=)``."""
        return _Method(self, method, request_serializer, response_deserializer).unary

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **_: Any,
    ) -> Callable[..., StreamCall]:
        """A server-streaming method's callable: it answers a ``StreamCall`` at once."""
        return _Method(self, method, request_serializer, response_deserializer).stream

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Not served: no reviewloop contract streams requests."""
        raise NotImplementedError("no reviewloop context streams requests")

    stream_stream = stream_unary

    async def channel_ready(self) -> None:
        """Ready at once: there is no connection to wait for."""
        return None

    async def close(self, grace: float | None = None) -> None:
        """Cancel the calls still under way on this channel, as closing a gRPC channel does."""
        for task in list(self._calls):
            task.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)

    async def __aenter__(self) -> InProcessChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _serving(self) -> LocalServer:
        server = self._server()
        if server is None or not server.serving:
            raise _error(grpc.StatusCode.UNAVAILABLE, f"{self.target} is not serving in this process")
        return server

    def _track(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return task


def _identity(value: Any) -> Any:
    return value


class _Finished:
    """A unary call that has ended, as a client interceptor sees it (``await call``, ``call.code()``)."""

    __slots__ = ("_answer", "_error")

    def __init__(self, answer: Any = None, error: grpc.aio.AioRpcError | None = None) -> None:
        self._answer, self._error = answer, error

    async def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.OK if self._error is None else self._error.code()

    async def details(self) -> str:
        return "" if self._error is None else self._error.details() or ""

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._answer

    def __await__(self) -> Any:
        return self._result().__await__()

    async def _result(self) -> Any:
        return self.result()


class _Method:
    """One method of one channel: the caller's multicallable."""

    def __init__(
        self,
        channel: InProcessChannel,
        method: str,
        serializer: Callable[[Any], bytes] | None,
        deserializer: Callable[[bytes], Any] | None,
    ) -> None:
        self.channel, self.method = channel, method
        self.serializer = serializer or _identity
        self.deserializer = deserializer or _identity

    def _details(self, timeout: float | None, metadata: Any) -> grpc.aio.ClientCallDetails:
        return grpc.aio.ClientCallDetails(self.method, timeout, metadata, None, None)

    # --- unary -----------------------------------------------------------------------------------

    # A stub's call takes its deadline as ``timeout``, as gRPC's does.
    async def unary(
        self,
        request: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        metadata: Any = None,
        **_: Any,
    ) -> Any:
        call: Any = self._unary_terminal
        for interceptor in reversed(self.channel._unary):
            call = functools.partial(interceptor.intercept_unary_unary, call)
        outcome = await call(self._details(timeout, metadata), request)
        return outcome.result() if isinstance(outcome, _Finished) else outcome

    async def _unary_terminal(self, details: grpc.aio.ClientCallDetails, request: Any) -> _Finished:
        try:
            server = self.channel._serving()
            payload = _sized(self.serializer(request), "Sent message")
            metadata = tuple(details.metadata or ())
            handler = await server.handler(self.method, metadata)
            if handler is None or handler.unary_unary is None:
                raise _error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            loop = asyncio.get_running_loop()
            deadline = None if details.timeout is None else loop.time() + details.timeout
            context = _Context(metadata, deadline)
            task = self.channel._track(server.spawn(_serve_unary(self.method, handler, payload, context)))
            try:
                # A cancelled caller cancels the task it awaits: the handler sees CancelledError.
                async with asyncio.timeout_at(deadline):
                    answer = await _awaited(task, self.channel.target)
            except TimeoutError:
                raise _error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
            if answer is None:
                raise context.failure()
            return _Finished(self.deserializer(answer))
        except grpc.aio.AioRpcError as error:
            return _Finished(error=error)

    # --- server streaming ------------------------------------------------------------------------

    def stream(
        self, request: Any, *, timeout: float | None = None, metadata: Any = None, **_: Any
    ) -> StreamCall:
        call: Any = self._stream_terminal
        for interceptor in reversed(self.channel._stream):
            call = functools.partial(interceptor.intercept_unary_stream, call)
        return StreamCall(call(self._details(timeout, metadata), request))

    async def _stream_terminal(self, details: grpc.aio.ClientCallDetails, request: Any) -> _Streaming:
        try:
            server = self.channel._serving()
            payload = _sized(self.serializer(request), "Sent message")
            metadata = tuple(details.metadata or ())
            handler = await server.handler(self.method, metadata)
            if handler is None or handler.unary_stream is None:
                raise _error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        except grpc.aio.AioRpcError as error:
            return _Streaming.failed(error, self.deserializer)
        loop = asyncio.get_running_loop()
        deadline = None if details.timeout is None else loop.time() + details.timeout
        context = _Context(metadata, deadline)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(STREAM_BUFFER)
        task = self.channel._track(server.spawn(_serve_stream(self.method, handler, payload, context, queue)))
        return _Streaming(task, context, queue, self.deserializer, deadline)


async def _serve_unary(
    method: str, handler: grpc.RpcMethodHandler[Any, Any], payload: bytes, context: _Context
) -> bytes | None:
    """The servicer's side of a unary call: the answer's bytes, or None with the status in ``context``."""
    try:
        request = handler.request_deserializer(payload) if handler.request_deserializer else payload
        serve: Any = handler.unary_unary
        answer = await serve(request, context)
        serialize = handler.response_serializer
        return _sized(serialize(answer) if serialize else answer, "Received message")
    except grpc.aio.AbortError:
        return None
    except Exception:
        context.crashed(method)
        return None


async def _serve_stream(
    method: str,
    handler: grpc.RpcMethodHandler[Any, Any],
    payload: bytes,
    context: _Context,
    queue: asyncio.Queue[bytes | None],
) -> None:
    """The servicer's side of a server stream: each answer's bytes into ``queue``, then None."""
    try:
        request = handler.request_deserializer(payload) if handler.request_deserializer else payload
        serialize = handler.response_serializer or _identity
        serve: Any = handler.unary_stream  # grpc.aio serves an async generator here
        async for answer in serve(request, context):
            await queue.put(_sized(serialize(answer), "Received message"))
    except grpc.aio.AbortError:
        pass
    except Exception:
        context.crashed(method)
    except asyncio.CancelledError:
        # Cancelled by its caller (who already set the status), or by the service stopping: the reader
        # is told the stream ended either way, never left waiting.
        if context.code is grpc.StatusCode.OK:
            context.code, context.details = grpc.StatusCode.UNAVAILABLE, _STOPPED
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(None)
        raise
    await queue.put(None)


async def _awaited(task: asyncio.Task[Any], target: str) -> Any:
    """``task``'s result; its cancellation by the service stopping is UNAVAILABLE, not the caller's own."""
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():  # the caller was cancelled, or its deadline
            raise
        raise _error(grpc.StatusCode.UNAVAILABLE, f"{target}: {_STOPPED}") from None


class _Streaming:
    """A server stream under way, as a client interceptor sees it (``add_done_callback``, ``code()``)."""

    def __init__(
        self,
        task: asyncio.Task[None] | None,
        context: _Context,
        queue: asyncio.Queue[bytes | None],
        deserializer: Callable[[bytes], Any],
        deadline: float | None,
    ) -> None:
        self._task, self._context, self._queue = task, context, queue
        self._deserializer = deserializer
        self._callbacks: list[Callable[[Any], None]] = []
        self._ended = False
        self._cancelled = False
        self._timer = None
        if deadline is not None and task is not None:
            self._timer = asyncio.get_running_loop().call_at(deadline, self._expire)

    @classmethod
    def failed(cls, error: grpc.aio.AioRpcError, deserializer: Callable[[bytes], Any]) -> _Streaming:
        context = _Context((), None)
        context.code, context.details, context.trailing = error.code(), error.details() or "", ()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        queue.put_nowait(None)
        return cls(None, context, queue, deserializer, None)

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._ended:
            callback(self)
        else:
            self._callbacks.append(callback)

    async def code(self) -> grpc.StatusCode:
        return self._context.code

    async def details(self) -> str:
        return self._context.details

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self._ended

    def cancel(self) -> bool:
        if self._ended:
            return False
        self._cancelled = True
        self._stop(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")
        return True

    def _expire(self) -> None:
        self._stop(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    def _stop(self, code: grpc.StatusCode, details: str) -> None:
        if self._task is not None:
            self._task.cancel()
        self._context.code, self._context.details = code, details
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(None)
        self._end()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    async def read(self) -> Any:
        """The next answer; ``grpc.aio.EOF`` once the stream ended well."""
        try:
            payload = await self._queue.get()
        except asyncio.CancelledError:
            self.cancel()  # a reader cancelled cancels its call, as grpc.aio does
            raise
        if payload is not None:
            return self._deserializer(payload)
        self._queue.put_nowait(None)  # every later read sees the end too
        self._end()
        if self._cancelled:
            raise asyncio.CancelledError()
        if self._context.code is not grpc.StatusCode.OK:
            raise self._context.failure()
        return grpc.aio.EOF

    async def __aiter__(self) -> AsyncIterator[Any]:
        while (answer := await self.read()) is not grpc.aio.EOF:
            yield answer

    def __del__(self) -> None:
        # A stream dropped unread and uncancelled is cancelled, as grpc.aio's call is when collected.
        if self._task is not None and not self._task.done():
            self._task.cancel()


class StreamCall:
    """What a server-streaming stub method returns: iterate it, ``read()`` it, ``cancel()`` it."""

    def __init__(self, opening: Coroutine[Any, Any, Any]) -> None:
        self._opening: asyncio.Task[Any] = asyncio.ensure_future(opening)
        self._call: _Streaming | None = None

    async def _opened(self) -> _Streaming:
        if self._call is None:
            self._call = await self._opening
        return self._call

    def cancel(self) -> bool:
        """Cancel the stream (its servicer's task); whoever iterates it gets CancelledError."""
        if self._call is not None:
            return self._call.cancel()
        if not self._opening.done():
            self._opening.add_done_callback(lambda opening: opening.cancelled() or opening.result().cancel())
            return True
        return bool(self._opening.result().cancel())

    async def code(self) -> grpc.StatusCode:
        """The stream's status code, as it stands."""
        return await (await self._opened()).code()

    async def details(self) -> str:
        """The stream's status text, as it stands."""
        return await (await self._opened()).details()

    async def read(self) -> Any:
        """The next answer, ``grpc.aio.EOF`` at the end; a failed stream raises its AioRpcError."""
        return await (await self._opened()).read()

    async def __aiter__(self) -> AsyncIterator[Any]:
        call = await self._opened()
        while (answer := await call.read()) is not grpc.aio.EOF:
            yield answer
