"""A real local HTTP classifier endpoint on port 0 whose next answers a test scripts."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Script:
    """One scripted answer: a status and body, optionally after a delay; ``close`` drops the socket."""

    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0
    close: bool = False


def answer(choice: str, confidence: float | None = None, probability: float | None = None) -> Script:
    body: dict[str, Any] = {"choice": choice}
    if confidence is not None:
        body["confidence"] = confidence
    if probability is not None:
        body["probability"] = probability
    return Script(200, orjson.dumps(body))


@dataclass
class ClassifierServer:
    scripts: deque[Script] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    port: int = 0
    _server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/classify"

    def script(self, *scripts: Script) -> None:
        self.scripts.extend(scripts)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                headers = {
                    k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.headers.append(headers)
                self.requests.append(orjson.loads(body) if body else {})
                script = self.scripts.popleft() if self.scripts else Script(500, b"unscripted")
                if script.delay_s:
                    await asyncio.sleep(script.delay_s)
                if script.close:
                    return
                writer.write(
                    f"HTTP/1.1 {script.status} X\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(script.body)}\r\n\r\n".encode()
                    + script.body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
