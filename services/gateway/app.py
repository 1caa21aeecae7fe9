"""The gateway application: routes, problem+json, contract headers, body limits, health, OpenAPI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from reviewloop.contract import CONTRACT_MANIFEST, CONTRACT_VERSION
from reviewloop.errors import Code, DomainError
from reviewloop.service import Peers
from reviewloop.storage import Database, make_engine
from reviewloop.storage.migrations import migrate
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import problems
from gateway.backends import Backends
from gateway.routes import admin, budget, events, reviews, rules
from gateway.settings import GatewaySettings
from gateway.store import metadata

MIGRATIONS = Path(__file__).parent / "migrations"


class OrjsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class ContractHeaders:
    """Every response carries ``X-Contract-Version`` (and echoes ``X-Request-Id``); bodies over the
    limit are refused with 413 before a route reads them."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        request_id = headers.get(b"x-request-id")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(b"x-contract-version", CONTRACT_VERSION.encode())]
                if request_id:
                    extra.append((b"x-request-id", request_id))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            response = problems.problem_response(
                DomainError(Code.PAYLOAD_TOO_LARGE, f"The request body exceeds {self.max_body_bytes} bytes.")
            )
            await response(scope, receive, send_with_headers)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body_bytes:
                raise DomainError(
                    Code.PAYLOAD_TOO_LARGE, f"The request body exceeds {self.max_body_bytes} bytes."
                )
            return message

        await self.app(scope, limited_receive, send_with_headers)


def create_app(settings: GatewaySettings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(make_engine(settings.db_url))
        await migrate(db.engine, MIGRATIONS, metadata)
        peers = Peers(settings.peers)
        app.state.db = db
        app.state.backends = Backends(peers, settings.backend_timeout_s)
        try:
            yield
        finally:
            await peers.close()
            await db.dispose()

    app = FastAPI(
        title="reviewloop",
        version=CONTRACT_VERSION,
        summary="The review loop for AI-agent output.",
        lifespan=lifespan,
        default_response_class=OrjsonResponse,
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    problems.install(app)
    for module in (reviews, events, rules, budget, admin):
        app.include_router(module.router)

    @app.get("/healthz", tags=["operations"])
    async def healthz(request: Request) -> Response:
        """200 when every backend reports SERVING; 503 naming the ones that do not."""
        backends = await request.app.state.backends.health()
        healthy = all(status == "SERVING" for status in backends.values())
        return OrjsonResponse(
            {"status": "ok" if healthy else "degraded", "backends": backends},
            status_code=200 if healthy else 503,
        )

    @app.get("/openapi.yaml", include_in_schema=False)
    async def openapi_yaml() -> Response:
        return Response(yaml.safe_dump(app.openapi(), sort_keys=False), media_type="application/yaml")

    @app.get("/v1/contract-manifest", tags=["operations"])
    async def contract_manifest() -> dict[str, Any]:
        return dict(CONTRACT_MANIFEST)

    app.add_middleware(ContractHeaders, max_body_bytes=settings.max_body_bytes)
    return app
