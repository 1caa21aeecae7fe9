"""Boot: ``python -m gateway`` serves the JSON surface with uvicorn on uvloop and httptools."""

from __future__ import annotations

from pathlib import Path

import uvicorn
from reviewloop import metrics, telemetry
from reviewloop.service import ServiceSpec

from gateway.asgi import create_app
from gateway.settings import GatewaySettings
from gateway.store import metadata


def main() -> None:
    telemetry.setup_logging()
    settings = GatewaySettings.from_env()
    provider = telemetry.setup("gateway", settings.data_dir, settings.otlp_endpoint)
    metrics.setup("gateway")
    app = create_app(settings)
    # FastAPI traces each request itself (a SERVER span named after the route template, the incoming
    # traceparent honoured) once a tracer provider is installed; contrib's FastAPIInstrumentor would add
    # a second span per request and re-match every route to name it.
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            loop="uvloop",
            http="httptools",
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
    finally:
        provider.shutdown()


# The gateway serves HTTP, not gRPC: it has a store and migrations like the services, and its own entry point.
SPEC: ServiceSpec[None] = ServiceSpec(
    name="gateway", metadata=metadata, migrations_dir=Path(__file__).parent / "migrations", entrypoint=main
)

if __name__ == "__main__":
    main()
