"""A real webhook receiver for tests: an ASGI app on uvicorn, on loopback, that records each request
and answers the statuses it is told to (then 200)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import uvicorn
from stack.launcher import free_port
from starlette.types import Receive, Scope, Send


@dataclass
class Receiver:
    url: str = ""
    statuses: list[int] = field(default_factory=list)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.received.append((headers, body))
        self.arrived.set()
        status = self.statuses.pop(0) if self.statuses else 200
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def until(self, count: int, timeout_s: float = 20.0) -> None:
        """Wait until ``count`` requests have arrived (a bound, not a timing assertion)."""
        async with asyncio.timeout(timeout_s):
            while len(self.received) < count:
                self.arrived.clear()
                await self.arrived.wait()


@asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(receiver, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes no event for it
        await asyncio.sleep(0.01)
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        server.should_exit = True
        await task


@dataclass
class RawReceiver:
    """A receiver written on the socket, for what uvicorn will not do: answer slowly or at length.

    ``head`` is written at once after the request arrives; then ``drip`` one byte every ``gap_s``
    (endless), or ``body_bytes`` of ``x`` as fast as the reader takes them. ``sent`` counts the body bytes
    the socket accepted, ``requests`` the requests that arrived."""

    head: bytes = b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n"
    drip: bytes = b""
    gap_s: float = 1.0
    body_bytes: int = 0
    url: str = ""
    sent: int = 0
    requests: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            self.requests += 1
            self.arrived.set()
            writer.write(self.head)
            await writer.drain()
            chunk = b"x" * 65536
            while self.sent < self.body_bytes:
                piece = chunk[: self.body_bytes - self.sent]
                writer.write(piece)
                await writer.drain()
                self.sent += len(piece)
            while self.drip:
                await asyncio.sleep(self.gap_s)
                writer.write(self.drip)
                await writer.drain()
                self.sent += len(self.drip)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # raw_receiving's exit ends a handler still dripping; ending quietly spares 3.11's streams
            # callback a cancelled task (it logs one as an error)
            pass
        finally:
            self.closed.set()
            writer.close()


@asynccontextmanager
async def raw_receiving(receiver: RawReceiver) -> AsyncIterator[RawReceiver]:
    server = await asyncio.start_server(receiver.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        server.close()
        for task in receiver.handlers:  # the ones still dripping
            task.cancel()
        await asyncio.gather(*receiver.handlers, return_exceptions=True)
