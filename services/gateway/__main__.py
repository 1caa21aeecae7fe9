"""Boot: ``python -m gateway`` serves the JSON surface with uvicorn on uvloop and httptools."""

from __future__ import annotations

import logging

import uvicorn
from reviewloop import telemetry

from gateway.asgi import create_app
from gateway.settings import GatewaySettings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = GatewaySettings.from_env()
    provider = telemetry.setup("gateway", settings.data_dir, settings.otlp_endpoint)
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


if __name__ == "__main__":
    main()
