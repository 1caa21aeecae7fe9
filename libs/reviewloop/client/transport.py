"""The two transports, on one base that makes every decision; each transport only does the I/O.

:class:`Transport` builds the request and its ``Idempotency-Key``, holds the retry policy, reads the answer
and (through :class:`~reviewloop.client.push.Resumption`) resumes a stream; :class:`SyncTransport` and
:class:`AsyncTransport` send, blocking or awaited.

The client's own retries (``tenacity``) repeat connection errors, ``503 unavailable``, and a ``429`` or
``503`` with ``Retry-After``, after the ``Retry-After`` or a jittered exponential backoff. Every mutation
carries an ``Idempotency-Key`` (a fresh one unless the caller passed one), so a repeat can never double a
write; a request without a key is never repeated.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Generator, Iterator, Mapping
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
import httpx_sse
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_never,
    stop_after_attempt,
    wait_random_exponential,
)

from reviewloop.client.call import Call
from reviewloop.client.problems import ReviewloopConnectionError, ReviewloopError
from reviewloop.client.push import Resumption, StreamedEvent
from reviewloop.contract import CONTRACT_VERSION

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 2
# The jittered exponential backoff between retries without a Retry-After: a random wait in
# [0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**attempt)] ("full jitter"), so clients that failed together
# do not come back together.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
# A Retry-After longer than this is not waited out inside one call: the error is raised with it.
MAX_RETRY_AFTER_S = 60.0


def _repeatable(request: Mapping[str, Any]) -> bool:
    """Whether a request may be sent again: a read, or a write that carries its ``Idempotency-Key``.

    The server answers a keyed repeat with the first result; a write without a key is never repeated.
    """
    return request["method"] == "GET" or "Idempotency-Key" in request["headers"]


def _worth_repeating(error: BaseException) -> bool:
    """Whether a failure is worth repeating as it was.

    An unreachable gateway, ``unavailable``, or a ``429`` / ``503`` that says when to come back (soon
    enough to wait inside one call). The other retryable codes (``stale``, ...) need a re-read and a new
    request, which only the caller can make.
    """
    if not isinstance(error, ReviewloopError):
        return False
    if error.retry_after is not None and error.retry_after > MAX_RETRY_AFTER_S:
        return False
    return (
        isinstance(error, ReviewloopConnectionError)
        or error.code == "unavailable"
        or (error.status in (429, 503) and error.retry_after is not None)
    )


_backoff = wait_random_exponential(multiplier=BACKOFF_BASE_S, max=BACKOFF_MAX_S)


def _wait(state: RetryCallState) -> float:
    """The server's ``Retry-After`` when it gave one, else the jittered exponential backoff."""
    error = state.outcome.exception() if state.outcome is not None else None
    if isinstance(error, ReviewloopError) and error.retry_after is not None:
        return error.retry_after
    return float(_backoff(state))


class Transport:
    """What both clients share: the gateway, the key, and every decision of a request but its I/O.

    Attributes:
        base_url: The gateway, e.g. ``http://127.0.0.1:8080``.
        headers: The headers of every request (the key, the client's contract version).
        max_retries: How many times a failure worth repeating is repeated.
    """

    def __init__(self, base_url: str, api_key: str, *, max_retries: int = DEFAULT_RETRIES) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {
            "Authorization": f"Bearer {api_key}",
            "User-Agent": f"reviewloop-python/{CONTRACT_VERSION}",
        }
        self.max_retries = max_retries

    def _request(self, call: Call[Any]) -> dict[str, Any]:
        """The httpx request of ``call``; a mutation gets its ``Idempotency-Key`` here, once per call."""
        headers = dict(self.headers)
        if call.mutation:
            headers["Idempotency-Key"] = call.idempotency_key or f"rlc-{uuid.uuid4().hex}"
        request: dict[str, Any] = {
            "method": call.method,
            "url": call.path,
            "params": call.params,
            "headers": headers,
        }
        if call.body is not None:
            request["json"] = call.body
        if call.timeout_s is not None:
            request["timeout"] = call.timeout_s
        return request

    def _retrying(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The tenacity policy of one request.

        Up to ``max_retries`` repeats of a request that is safe to repeat (``_repeatable``), after a problem
        worth repeating as it is (``_worth_repeating``), waiting as ``_wait`` says.
        """
        return {
            "stop": stop_after_attempt(self.max_retries + 1),
            "wait": _wait,
            "retry": retry_if_exception(_worth_repeating) if _repeatable(request) else retry_never,
            "reraise": True,
        }

    @contextmanager
    def _answering(self, call: Call[Any]) -> Iterator[None]:
        """An unreachable gateway, inside, raises the client's own error, never a raw ``httpx`` one."""
        try:
            yield
        except httpx.TransportError as exc:
            raise ReviewloopConnectionError(call.method, self.base_url + call.path, exc) from exc

    @staticmethod
    def _answer(call: Call[T], response: httpx.Response) -> T:
        if response.is_error:
            raise ReviewloopError.of(response)
        return call.parse(response.json())


class AsyncTransport(Transport):
    """Runs verbs on an ``httpx.AsyncClient``. Use as ``async with``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, max_retries=max_retries)
        self.http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, transport=transport)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connection pool; ``async with`` does this on exit."""
        await self.http.aclose()

    async def run(self, call: Call[T]) -> T:
        """Run one verb (``await rl.run(Verbs.get_review(id))``); every verb method is this.

        A connection error, a ``503 unavailable``, or a ``429`` / ``503`` with ``Retry-After`` is retried up
        to ``max_retries`` times, after the ``Retry-After`` or a jittered exponential backoff; the call's
        ``Idempotency-Key`` makes that safe for a mutation.

        Args:
            call: The verb, as a :class:`Verbs` builder returns it.

        Returns:
            The answer, parsed into the call's shape.

        Raises:
            ReviewloopConnectionError: The gateway could not be reached, after the retries.
            ReviewloopError: The server answered a problem.
        """
        request = self._request(call)
        async for attempt in AsyncRetrying(**self._retrying(request)):
            with attempt, self._answering(call):
                return self._answer(call, await self.http.request(**request))
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def stream(
        self, *, last_event_id: str | None = None, reconnect_s: float = 1.0, idle_timeout_s: float = 60.0
    ) -> AsyncGenerator[StreamedEvent, None]:
        """The caller's nudges as they land (server-sent events), forever: ``async for item in rl.stream()``.

        A dropped connection (or ``503``) is reopened after ``reconnect_s`` with ``Last-Event-ID``, so the
        stream resumes right after the last event yielded: no gap, no repeat. Keep ``item.id`` and pass it
        as ``last_event_id`` to resume in a new process. Ack as usual (``ack_review_events``): an acked
        nudge is never streamed again. ``idle_timeout_s`` must exceed the server's heartbeat (15 s).

        Raises:
            ReviewloopError: The server refused the stream (401, 403, a bad ``Last-Event-ID``); a ``429
                rate_limited`` (the project's open streams at the gateway's cap) or a ``503`` is waited out
                (its Retry-After) and the stream opened again.
        """
        resume = Resumption(self.headers, last_event_id, reconnect_s, idle_timeout_s)
        while True:
            with suppress(httpx.TransportError):  # reopened below, after the last event yielded
                async with self.http.stream(**resume.request()) as response:
                    if response.is_error:
                        await response.aread()
                        resume.refused(response)
                    else:
                        async for sse in httpx_sse.EventSource(response).aiter_sse():
                            if item := resume.take(sse):
                                yield item
            await asyncio.sleep(resume.wait_s)


class SyncTransport(Transport):
    """Runs verbs on a blocking ``httpx.Client``. Use as ``with``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, max_retries=max_retries)
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connection pool; ``with`` does this on exit."""
        self.http.close()

    def run(self, call: Call[T]) -> T:
        """Run one verb (``rl.run(Verbs.get_review(id))``); every verb method is this.

        As :meth:`AsyncTransport.run`, blocking.
        """
        request = self._request(call)
        for attempt in Retrying(**self._retrying(request)):
            with attempt, self._answering(call):
                return self._answer(call, self.http.request(**request))
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def stream(
        self, *, last_event_id: str | None = None, reconnect_s: float = 1.0, idle_timeout_s: float = 60.0
    ) -> Generator[StreamedEvent, None, None]:
        """The caller's nudges as they land: ``for item in rl.stream()``. As :meth:`AsyncTransport.stream`."""
        resume = Resumption(self.headers, last_event_id, reconnect_s, idle_timeout_s)
        while True:
            with suppress(httpx.TransportError), self.http.stream(**resume.request()) as response:
                if response.is_error:
                    response.read()
                    resume.refused(response)
                else:
                    for sse in httpx_sse.EventSource(response).iter_sse():
                        if item := resume.take(sse):
                            yield item
            time.sleep(resume.wait_s)
