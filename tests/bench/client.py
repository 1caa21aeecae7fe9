"""The load generator's HTTP/1.1 client: keep-alive connections, a fair wait for a free one, nothing else.

The generator shares the machine's two cores with the system it measures, so it must cost little. httpx
cost the open-loop submits about 3 ms of CPU a request once requests queued for its connections (its
pool walks every waiting request on each change): at 200 submits/s the generator took 0.6 of a core and
the queue it made fed itself. This client costs a parse of the status line and headers per answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(frozen=True)
class Response:
    status_code: int
    headers: dict[str, str]  # names in lower case
    content: bytes

    def json(self) -> Any:
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


class Client:
    """Requests to one ``base`` URL over at most ``max_connections`` kept-alive connections."""

    def __init__(self, base: str, *, max_connections: int = 64, timeout: float = 30.0) -> None:
        url = urlsplit(base)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 80
        self._authority = url.netloc.encode()
        self._timeout = timeout
        self._slots = asyncio.Semaphore(max_connections)  # FIFO: waiting costs nothing per request
        self._idle: list[Connection] = []

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for _reader, writer in self._idle:
            writer.close()
        self._idle.clear()

    async def get(self, path: str, *, params: dict[str, Any] | None = None, **kw: Any) -> Response:
        return await self.request("GET", f"{path}?{urlencode(params)}" if params else path, **kw)

    async def post(self, path: str, *, json: Any = None, **kw: Any) -> Response:
        return await self.request("POST", path, json=json, **kw)

    async def request(
        self, method: str, target: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> Response:
        body = b"" if json is None else orjson.dumps(json)
        head = [f"{method} {target} HTTP/1.1".encode(), b"Host: " + self._authority]
        if json is not None:
            head += [b"Content-Type: application/json", b"Content-Length: %d" % len(body)]
        head += [f"{name}: {value}".encode() for name, value in (headers or {}).items()]
        message = b"\r\n".join(head) + b"\r\n\r\n" + body
        async with self._slots, asyncio.timeout(self._timeout):
            reused, connection = await self._connection()
            try:
                response, keep = await self._exchange(connection, message)
            except (ConnectionError, asyncio.IncompleteReadError) as error:
                if not reused or (isinstance(error, asyncio.IncompleteReadError) and error.partial):
                    raise
                # The server closed a kept-alive connection (its idle timeout) as the request went out:
                # it never read it, so it goes once more on a new connection, as httpx does.
                connection = await asyncio.open_connection(self._host, self._port)
                response, keep = await self._exchange(connection, message)
            if keep:
                self._idle.append(connection)
            else:
                connection[1].close()
            return response

    async def _exchange(self, connection: Connection, message: bytes) -> tuple[Response, bool]:
        reader, writer = connection
        try:
            writer.write(message)
            return await self._read(reader)
        except BaseException:
            writer.close()  # a connection that failed mid-exchange is never reused
            raise

    async def _connection(self) -> tuple[bool, Connection]:
        """An idle connection the server has not closed (True), else a new one (False)."""
        while self._idle:
            reader, writer = self._idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return True, (reader, writer)
            writer.close()
        return False, await asyncio.open_connection(self._host, self._port)

    @staticmethod
    async def _read(reader: asyncio.StreamReader) -> tuple[Response, bool]:
        """One response, and whether its connection may carry the next request."""
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                chunks.append((await reader.readexactly(size + 2))[:-2])
            await reader.readuntil(b"\r\n")  # the empty trailer section
            content = b"".join(chunks)
        else:
            content = await reader.readexactly(int(headers.get("content-length", "0")))
        return Response(status, headers, content), headers.get("connection", "").lower() != "close"
