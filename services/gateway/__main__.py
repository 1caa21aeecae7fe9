"""Boot: ``python -m gateway`` serves the JSON surface with uvicorn on uvloop and httptools."""

from __future__ import annotations

import socket
from pathlib import Path

import uvicorn
from reviewloop import metrics, telemetry
from reviewloop.service import ServiceSpec, settle_heap

from gateway.asgi import create_app
from gateway.settings import GatewaySettings
from gateway.store import metadata


class _Server(uvicorn.Server):
    """uvicorn's server, settling the heap once it has booted (the app's lifespan ran, the socket is bound)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        settle_heap()


def main() -> None:
    telemetry.setup_logging()
    settings = GatewaySettings.from_env()
    provider = telemetry.setup("gateway", settings.data_dir, settings.otlp_endpoint)
    metrics.setup("gateway")
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    try:
        _Server(config).run()
    finally:
        provider.shutdown()


# The gateway serves HTTP, not gRPC: it has a store and migrations like the services, and its own entry point.
SPEC: ServiceSpec[None] = ServiceSpec(
    name="gateway", metadata=metadata, migrations_dir=Path(__file__).parent / "migrations", entrypoint=main
)

if __name__ == "__main__":
    main()
