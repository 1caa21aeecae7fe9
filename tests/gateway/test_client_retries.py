"""The Python client's retries, against a real local server that fails, then recovers: connection errors,
``503 unavailable`` and a ``429`` / ``503`` with ``Retry-After`` are repeated with the same Idempotency-Key;
a write without a key never is; an unreachable gateway is the client's own error, never a raw httpx one."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from reviewloop.client import (
    AsyncReviewloop,
    Call,
    Reviewloop,
    ReviewloopConnectionError,
    ReviewloopError,
    transport,
)
from stack.launcher import free_port
from starlette.types import Receive, Scope, Send
from tenacity import wait_random_exponential


def problem(status: int, code: str) -> dict[str, Any]:
    return {
        "type": f"https://reviewloop.dev/problems/{code}",
        "title": code,
        "status": status,
        "detail": code,
        "code": code,
    }


UNAVAILABLE = (503, problem(503, "unavailable"), {})
OK = (200, {"ok": True}, {})


def refusal(status: int, code: str, retry_after: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return status, problem(status, code), headers


@dataclass
class Scripted:
    """An ASGI app answering the scripted (status, body, headers) in turn, then 200; it records each
    request's method and Idempotency-Key."""

    script: list[tuple[int, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    seen: list[tuple[str, str | None]] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen.append((scope["method"], headers.get("idempotency-key")))
        status, body, extra = self.script.pop(0) if self.script else OK
        kind = b"application/problem+json" if status >= 400 else b"application/json"
        answer_headers = [(b"content-type", kind), *((k.encode(), v.encode()) for k, v in extra.items())]
        await send({"type": "http.response.start", "status": status, "headers": answer_headers})
        await send({"type": "http.response.body", "body": orjson.dumps(body)})


@asynccontextmanager
async def serving(app: Scripted, port: int, after_s: float = 0.0) -> AsyncIterator[None]:
    """``app`` on ``127.0.0.1:port``, listening only ``after_s`` from now (until then: refused)."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )

    async def serve() -> None:
        await asyncio.sleep(after_s)
        await server.serve()

    task = asyncio.create_task(serve())
    while not after_s and not server.started:  # noqa: ASYNC110 - uvicorn exposes no event for it
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        await task


@contextmanager
def serving_in_a_thread(app: Scripted, port: int, after_s: float = 0.0) -> Iterator[None]:
    """The same, for the sync client: the server on its own event loop in a thread."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )

    def serve() -> None:
        time.sleep(after_s)
        server.run()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    while not after_s and not server.started:
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)


def read() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/review-policy", dict)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The production backoff, scaled down: the same jittered exponential shape, in tenths of a second."""
    monkeypatch.setattr(transport, "_backoff", wait_random_exponential(0.05, 0.4))


async def test_a_refused_connection_is_retried_until_the_server_is_up() -> None:
    app, port = Scripted(), free_port()
    async with (
        serving(app, port, after_s=0.3),
        AsyncReviewloop(f"http://127.0.0.1:{port}", "k", max_retries=8) as rl,
    ):
        assert await rl.run(read()) == {"ok": True}
    assert app.seen == [("GET", None)]  # the refused attempts never reached it


async def test_unavailable_is_retried_with_the_same_idempotency_key_until_it_recovers() -> None:
    app, port = Scripted([UNAVAILABLE, UNAVAILABLE]), free_port()
    async with serving(app, port), AsyncReviewloop(f"http://127.0.0.1:{port}", "k") as rl:
        await rl.run(Call("POST", "/v1/reviews/rr_1/cancel", dict, body={"parent_revision": 1}))
    assert [method for method, _ in app.seen] == ["POST"] * 3
    keys = {key for _, key in app.seen}
    assert len(keys) == 1 and None not in keys  # one write, repeated under its one key


async def test_a_429_or_503_with_retry_after_waits_it_out_and_one_without_is_raised() -> None:
    app, port = Scripted([refusal(429, "rate_limited", "1"), refusal(503, "internal", "0")]), free_port()
    async with serving(app, port), AsyncReviewloop(f"http://127.0.0.1:{port}", "k") as rl:
        started = time.monotonic()
        assert await rl.run(read()) == {"ok": True}
        assert time.monotonic() - started >= 0.9  # the Retry-After, not the (shorter) backoff
        assert len(app.seen) == 3

        app.script = [refusal(429, "rate_limited", None)]
        with pytest.raises(ReviewloopError) as limited:
            await rl.run(read())
        assert limited.value.code == "rate_limited" and len(app.seen) == 4  # no Retry-After: no repeat

        app.script = [refusal(429, "rate_limited", "600")]
        with pytest.raises(ReviewloopError) as later:
            await rl.run(read())
        assert later.value.retry_after == 600 and len(app.seen) == 5  # too long to wait inside a call


async def test_a_write_without_its_idempotency_key_is_never_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    app, port = Scripted([UNAVAILABLE]), free_port()
    async with serving(app, port), AsyncReviewloop(f"http://127.0.0.1:{port}", "k") as rl:
        keyed = rl._request

        def unkeyed(call: Call[Any]) -> dict[str, Any]:
            request = keyed(call)
            request["headers"].pop("Idempotency-Key")
            return request

        monkeypatch.setattr(rl, "_request", unkeyed)
        with pytest.raises(ReviewloopError) as refused:
            await rl.run(Call("POST", "/v1/reviews/rr_1/cancel", dict, body={"parent_revision": 1}))
    assert refused.value.code == "unavailable"
    assert app.seen == [("POST", None)]


async def test_an_unreachable_gateway_raises_the_clients_own_error_after_its_retries() -> None:
    port = free_port()  # nothing listens
    async with AsyncReviewloop(f"http://127.0.0.1:{port}", "k", max_retries=2) as rl:
        with pytest.raises(ReviewloopConnectionError) as unreachable:
            await rl.run(read())
    error = unreachable.value
    assert isinstance(error, ReviewloopError) and not isinstance(error, httpx.HTTPError)
    assert (error.code, error.status, error.method) == ("unavailable", 0, "GET")
    assert isinstance(error.__cause__, httpx.ConnectError)
    assert f"127.0.0.1:{port}/v1/review-policy" in str(error)


def test_the_sync_client_retries_the_same_way() -> None:
    app, port = Scripted([UNAVAILABLE]), free_port()
    with (
        serving_in_a_thread(app, port, after_s=0.3),
        Reviewloop(f"http://127.0.0.1:{port}", "k", max_retries=8) as rl,
    ):
        assert rl.run(read()) == {"ok": True}
    assert len(app.seen) == 2  # refused until up, then the 503, then the answer
    with (
        Reviewloop(f"http://127.0.0.1:{free_port()}", "k", max_retries=1) as rl,
        pytest.raises(ReviewloopConnectionError),
    ):
        rl.run(read())
