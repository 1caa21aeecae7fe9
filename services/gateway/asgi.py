"""The gateway's ASGI application: its routers, problem+json, contract headers, body limits, idempotent
mutations, health, the OpenAPI document and the MCP endpoint."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.datastructures import Default
from fastapi.openapi.utils import get_openapi
from reviewloop.contract import CONTRACT_MANIFEST, CONTRACT_VERSION
from reviewloop.errors import DomainError, invalid
from reviewloop.inproc import LocalServer
from reviewloop.service import Peers
from reviewloop.shapes import ContractManifest, Health, component_schemas
from reviewloop.storage import Database, make_engine
from reviewloop.storage.migrations import migrate
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import constraints, idempotency, operations, problems, ratelimits
from gateway.auth import KeyCache, authenticate
from gateway.backends import Backends
from gateway.console import create_console
from gateway.feeds import Feeds
from gateway.headers import IDEMPOTENCY_KEY_PATTERN
from gateway.mcp import MCP_PATH, McpGateway
from gateway.responses import OrjsonResponse
from gateway.routes import ROUTERS, plain_parameters
from gateway.settings import GatewaySettings
from gateway.store import metadata

MIGRATIONS = Path(__file__).parent / "migrations"
BODY_TOO_LARGE = problems.BODY_TOO_LARGE


IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_EXTENSION = "x-idempotency"  # "service": the route passes the key on; "gateway": this middleware
_MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_CONTRACT_VERSION = (b"x-contract-version", CONTRACT_VERSION.encode())


class Edge:
    """The gateway's one middleware, a plain ASGI one around FastAPI's routing.

    - Every response carries ``X-Contract-Version`` (and echoes ``X-Request-Id``); bodies over the limit
      are refused with 413 before a route reads them.
    - Every request but the probes is observed (``operations.Observation``: span annotations, metric,
      access log).
    - ``Idempotency-Key`` on every mutation: a route that declares the header passes the key to its
      owning service (which dedupes in its own transaction); for every other mutation the gateway replays
      the first 2xx answer given to the same caller under the same key, refuses the same key with a
      different request (``409 idempotency_conflict``), and runs the mutation once even when retries race.
    """

    def __init__(self, app: ASGIApp, api: FastAPI, max_body_bytes: int) -> None:
        self.app = app
        self.api = api
        self.max_body_bytes = max_body_bytes
        self._owned: list[tuple[str, re.Pattern[str], str]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        extra = [_CONTRACT_VERSION]
        if request_id := headers.get(b"x-request-id"):
            extra.append((b"x-request-id", request_id))
        observation = None if scope["path"] in operations.QUIET else operations.Observation(scope, headers)

        async def edge_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            if observation is not None:
                observation.sent(message)
            await send(message)

        try:
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                response = problems.problem_response(problems.body_too_large(self.max_body_bytes))
                await response(scope, receive, edge_send)
                return
            received = 0

            async def limited_receive() -> Message:
                nonlocal received
                message = await receive()
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    # FastAPI turns any failure while it reads a body into a 400; this flag keeps it a 413.
                    scope[BODY_TOO_LARGE] = True
                    raise problems.body_too_large(self.max_body_bytes)
                return message

            verb = ratelimits.verb_class(scope["method"], scope["path"])
            if verb is not None and (refusal := await self.rate_limited(scope, verb)) is not None:
                await refusal(scope, receive, edge_send)
                return
            if scope["method"] in _MUTATIONS:
                await self.mutation(scope, limited_receive, edge_send)
            else:
                await self.app(scope, limited_receive, edge_send)
        except Exception as error:
            if observation is not None:
                observation.failed(error)
            raise
        finally:
            if observation is not None:
                observation.done()

    async def rate_limited(self, scope: Scope, verb: str) -> Response | None:
        """The ``429 rate_limited`` answer when the caller is past a limit of ``verb`` (``ratelimits``);
        None to go on (an unauthenticated request goes on to its route's 401)."""
        request = Request(scope)
        try:
            caller = await authenticate(request)
        except DomainError:
            return None
        try:
            await self.api.state.rate_limits.check(verb, caller)
        except DomainError as error:
            return problems.problem_response(error, request)
        return None

    def operation(self, method: str, path: str) -> str | None:
        """The gateway-owned operation ``method path`` names, if any."""
        if self._owned is None:
            self._owned = [
                (
                    verb.upper(),
                    re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"),
                    op["operationId"],
                )
                for template, item in self.api.openapi().get("paths", {}).items()
                for verb, op in item.items()
                if op.get(IDEMPOTENCY_EXTENSION) == "gateway"
            ]
        return next((name for verb, rx, name in self._owned if verb == method and rx.match(path)), None)

    async def mutation(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A mutation: run once per ``Idempotency-Key`` when the gateway owns its idempotency."""
        request = Request(scope)
        key = request.headers.get(IDEMPOTENCY_HEADER)
        operation = self.operation(scope["method"], scope["path"]) if key is not None else None
        if key is None or operation is None:
            await self.app(scope, receive, send)
            return
        try:
            if not _IDEMPOTENCY_KEY.match(key):
                raise invalid("/Idempotency-Key", "printable ASCII, 1 to 255 characters")
            caller = await authenticate(request)  # a revoked key never gets a replay
            body = await idempotency.whole_body(receive)
        except DomainError as error:
            await problems.problem_response(error, request)(scope, receive, send)
            return
        once = idempotency.Once(
            self.api.state.db,
            owner=f"{caller.key_id or 'bootstrap'}:{operation}",
            key=key,
            fingerprint=idempotency.fingerprint(scope, body),
            lease=timedelta(seconds=self.api.state.settings.idempotency_lease_s),
        )
        answer = await once.claim()
        if isinstance(answer, DomainError):
            answer = problems.problem_response(answer, request)
        if answer is not None:
            await answer(scope, receive, send)
            return
        await once.run(self.app, scope, body, receive, send)


meta = APIRouter()  # the gateway's own answers about itself


@meta.get("/healthz", tags=["operations"], response_model=Health)
async def healthz(request: Request) -> Response:
    """200 when every backend reports SERVING; 503 naming the ones that do not."""
    backends = await request.app.state.backends.health()
    healthy = all(status == "SERVING" for status in backends.values())
    return OrjsonResponse(
        {"status": "ok" if healthy else "degraded", "backends": backends},
        status_code=200 if healthy else 503,
    )


@meta.get("/openapi.yaml", include_in_schema=False)
async def openapi_yaml(request: Request) -> Response:
    return Response(yaml.safe_dump(request.app.openapi(), sort_keys=False), media_type="application/yaml")


@meta.get(
    "/v1/contract-manifest",
    tags=["operations"],
    operation_id="get_contract_manifest",
    response_model=ContractManifest,
)
async def contract_manifest() -> dict[str, Any]:
    """The machine-readable contract a harness pins against: version, shapes and skills."""
    return dict(CONTRACT_MANIFEST)


def _lifespan(
    settings: GatewaySettings, local: Mapping[str, LocalServer] | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """What the gateway opens while it serves (its store, its peers, the feeds, MCP) and closes after."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        fast_paths = settings.fast_paths
        db = Database(make_engine(settings.db_url, settings.db_pool_size, fast_paths), fast_paths)
        await migrate(db.engine, MIGRATIONS, metadata)
        peers = Peers(settings.peers, settings.trust, local)
        app.state.db = db
        app.state.backends = Backends(peers, settings.backend_timeout_s)
        app.state.rate_limits = ratelimits.RateLimits(db, settings.rate_limits)
        app.state.feeds = Feeds(app.state.backends, settings.streams_per_key, settings.streams_per_project)
        # Built before serving: the first keyed mutation (which asks which operations the gateway owns)
        # or MCP call would otherwise hold the event loop for its ~0.6 s of CPU.
        app.openapi()
        apart = await operations.serve_apart(app) if settings.metrics_listen else None
        try:
            async with app.state.mcp.run():
                yield
        finally:
            if apart is not None:
                apart.close()
            await app.state.feeds.close()
            await peers.close()
            await db.dispose()

    return lifespan


def create_app(settings: GatewaySettings, local: Mapping[str, LocalServer] | None = None) -> FastAPI:
    """The gateway's app; ``local`` (monolithic mode) reaches the services through in-process channels."""
    app = FastAPI(
        title="reviewloop",
        version=CONTRACT_VERSION,
        summary="The review loop for AI-agent output.",
        lifespan=_lifespan(settings, local),
        # A route with a response_model writes its shape's JSON in one pass (pydantic's dump_json); only a
        # route without one falls back to orjson. (The class given bare would turn that fast path off.)
        default_response_class=Default(OrjsonResponse),
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
        # One schema per shape, named as the spec names it (no "-Input"/"-Output" twins).
        separate_input_output_schemas=False,
        # A route's operationId (and MCP tool name) is its spec verb: the explicit operation_id, else
        # the endpoint's function name, never FastAPI's path-mangled default.
        generate_unique_id_function=lambda route: route.operation_id or route.name,
        # No telemetry of FastAPI's: the request's server span, its metric and its log line are
        # ``operations.Observation``'s (FastAPI's spans cost ~0.2 ms of CPU per request; issue 18).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.key_cache = KeyCache(settings.key_cache_s)
    problems.install(app)
    for router in ROUTERS:
        app.include_router(router, dependencies=[Depends(plain_parameters)])
    app.include_router(operations.router)
    app.mount("/console", create_console(app.state))  # the reviewer console (server-rendered pages)
    app.state.mcp = McpGateway(app, settings.mcp_allowed_hosts)
    # An ASGI endpoint (not a Mount), so "/mcp" itself answers without a redirect to "/mcp/".
    app.router.routes.append(Route(MCP_PATH, endpoint=app.state.mcp, methods=["GET", "POST", "DELETE"]))
    app.include_router(meta)
    app.openapi = lambda: contract_openapi(app)  # type: ignore[method-assign]
    app.add_middleware(Edge, api=app, max_body_bytes=settings.max_body_bytes)
    return app


_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_PROBLEM_RESPONSES = {
    "4XX": {
        "description": "A problem the caller can fix: branch on `code`.",
        "content": {"application/problem+json": {"schema": _PROBLEM_REF}},
    },
    "5XX": {
        "description": "`unavailable` (503, or 504 past a deadline; with Retry-After) or `internal` (500).",
        "content": {"application/problem+json": {"schema": _PROBLEM_REF}},
    },
}


_GATEWAY_IDEMPOTENCY_PARAMETER = {
    "name": IDEMPOTENCY_HEADER,
    "in": "header",
    "required": False,
    "description": (
        "Makes a retried mutation safe: the same key with the same request answers the first result "
        "(with `Idempotent-Replayed: true`); the same key with a different request is 409 idempotency_conflict."
    ),
    "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
}


def contract_openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI 3.1 document: every contract shape as a component schema, bearer auth, and
    problem+json as the answer to every failure (FastAPI's own 422 shape is never sent)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    document = get_openapi(
        title=app.title,
        version=CONTRACT_VERSION,
        openapi_version=app.openapi_version,
        summary=app.summary,
        routes=app.routes,
        separate_input_output_schemas=False,
    )
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name, schema in component_schemas().items():
        schemas.setdefault(name, schema)
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    components["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "A project API key (rlk_...) or, on /v1/admin, the bootstrap admin token.",
        }
    }
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            if method.upper() in _MUTATIONS:
                parameters = operation.setdefault("parameters", [])
                passed_on = any(p["in"] == "header" and p["name"] == IDEMPOTENCY_HEADER for p in parameters)
                operation[IDEMPOTENCY_EXTENSION] = "service" if passed_on else "gateway"
                if not passed_on:
                    parameters.append(_GATEWAY_IDEMPOTENCY_PARAMETER)
                for parameter in parameters:
                    # A route's `= ""` means "no key": the header is absent, never an empty value, which
                    # its own pattern refuses (a generated client would send it and get a 422).
                    if parameter["in"] == "header" and parameter["name"] == IDEMPOTENCY_HEADER:
                        parameter.get("schema", {}).pop("default", None)
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            responses.update(_PROBLEM_RESPONSES)
            if path.startswith("/v1/") and path != "/v1/contract-manifest":
                operation["security"] = [{"bearer": []}]
    constraints.publish(document)
    app.openapi_schema = document
    return document
