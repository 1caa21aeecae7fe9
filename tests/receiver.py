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
