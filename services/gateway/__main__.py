"""Boot: ``python -m gateway`` serves the JSON surface with uvicorn on uvloop and httptools."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Generator, Mapping
from typing import Any, cast

import uvicorn
from reviewloop import metrics, telemetry
from reviewloop.inproc import LocalServer
from reviewloop.service import ServiceSpec, settle_heap
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.asgi import create_app
from gateway.settings import GatewaySettings


class OneWrite:
    """A connection's transport whose writes in one turn of the event loop go out as one send.

    uvicorn writes a response's head and its body separately: two sends, two TCP segments and two
    wake-ups of the client for every small JSON answer (issue 18: one send saves ~2% of a lifecycle's
    CPU). A response written in one turn (every non-streamed one) now leaves in one send at the end of
    that turn; a streamed one's chunks each leave at the end of their own turn.
    Everything but ``write`` and ``close`` is the connection's own transport.
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self._flush)
        self._held.append(data)

    def _flush(self) -> None:
        held, self._held = self._held, []
        if held and not self._transport.is_closing():  # an aborted connection drops what it held
            self._transport.write(b"".join(held))

    def close(self) -> None:
        self._flush()  # what was written before the close still goes out first
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, on a ``OneWrite`` transport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(cast(asyncio.Transport, OneWrite(transport, self.loop)))


class _Server(uvicorn.Server):
    """uvicorn's server, settling the heap once it has booted (the app's lifespan ran, the socket is bound)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        settle_heap()


class _Embedded(_Server):
    """The gateway as one part of a process that owns the signals (``reviewloop up --target all``).

    It never installs handlers of its own: the process stops it by setting ``should_exit``.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def server(
    settings: GatewaySettings, *, embedded: bool = False, local: Mapping[str, LocalServer] | None = None
) -> uvicorn.Server:
    """The gateway's uvicorn server; ``embedded`` leaves SIGTERM and SIGINT to the process that runs it.

    ``local``: the services of the same process, reached through in-process channels (``Peers``).
    """
    config = uvicorn.Config(
        create_app(settings, local),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=HttpProtocol,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    return (_Embedded if embedded else _Server)(config)


def main() -> None:
    telemetry.setup_logging()
    settings = GatewaySettings.from_env(os.environ)
    provider = telemetry.setup("gateway", settings.data_dir, settings.otlp_endpoint, settings.sampling)
    metrics.setup("gateway")
    try:
        server(settings).run()
    finally:
        provider.shutdown()


# The gateway serves HTTP, not gRPC: it has a store and migrations like the services, and its own entry point.
SPEC = ServiceSpec.of(__package__, entrypoint=main)

if __name__ == "__main__":
    main()
