"""What an SRE reads off the gateway: the request span's review and problem code, the HTTP metrics,
the access log, and the ``/metrics``, ``/livez`` and ``/readyz`` endpoints."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from opentelemetry import context, propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from reviewloop import metrics, telemetry
from reviewloop.errors import Code, DomainError
from sqlalchemy import text
from starlette.responses import Response
from starlette.types import Message, Scope

from gateway.responses import OrjsonResponse

access_log = logging.getLogger("reviewloop.access")
# Answers read back for their review id or problem code: problems and a mutation's small JSON answer.
_CAPTURE_LIMIT = 64 * 1024
# Probes and scrapes: no metric, no access-log line.
QUIET = frozenset({"/metrics", "/livez", "/readyz"})


_tracer = trace.get_tracer("gateway")


class Observation:
    """One request as an SRE reads it: its server span (``METHOD route``, the child of a caller's
    ``traceparent``; ``reviewloop.review_id`` from the path or, for a submit, from the answer;
    ``problem_code`` and ERROR on every 4xx/5xx), its metric and one access-log line. The gateway's
    middleware (``asgi.Edge``) opens it around the request, feeds it every message it sends (``sent``)
    and calls ``done`` when the request is over.

    The span is ours, not FastAPI's: its telemetry middleware cost ~0.2 ms of CPU per request (issue 18).
    """

    __slots__ = ("body", "capture", "code", "review_id", "scope", "span", "started", "status", "token")

    def __init__(self, scope: Scope, headers: dict[bytes, bytes]) -> None:
        self.scope = scope
        self.started = time.perf_counter()
        self.status, self.capture, self.body, self.code, self.review_id = 0, False, b"", "", ""
        parent = None
        if traceparent := headers.get(b"traceparent"):
            carrier = {"traceparent": traceparent.decode("latin-1")}
            if tracestate := headers.get(b"tracestate"):
                carrier["tracestate"] = tracestate.decode("latin-1")
            parent = propagate.extract(carrier)
        method = scope["method"]
        self.span = _tracer.start_span(
            method,
            parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"]},
        )
        self.token = context.attach(trace.set_span_in_context(self.span, parent))

    def failed(self, error: BaseException) -> None:
        """The request raised ``error`` past every handler (the server answers 500)."""
        self.span.record_exception(error)
        self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))

    def sent(self, message: Message) -> None:
        """Watch one message on its way out."""
        if message["type"] == "http.response.start":
            self.status = status = message["status"]
            kind = dict(message.get("headers", [])).get(b"content-type", b"")
            self.capture = status >= 400 or (
                self.scope["method"] == "POST" and b"json" in kind and "review_id" not in _params(self.scope)
            )
        elif message["type"] == "http.response.body":
            if self.capture and len(self.body) < _CAPTURE_LIMIT:
                self.body += message.get("body", b"")
            if not message.get("more_body", False):
                self._annotate()

    def done(self) -> None:
        """The request is over: its span ends, its metric and its access-log line."""
        scope = self.scope
        seconds = time.perf_counter() - self.started
        route = getattr(scope.get("route"), "path", "unmatched")
        status = self.status or 500
        metrics.http_duration.record(
            seconds,
            {
                "http.request.method": scope["method"],
                "http.route": route,
                "http.response.status_code": status,
                "problem_code": self.code,
            },
        )
        access_log.info(
            "%s %s %d",
            scope["method"],
            scope["path"],
            status,
            extra={
                "fields": {
                    "method": scope["method"],
                    "path": scope["path"],
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                    "problem_code": self.code,
                    "review_id": self.review_id,
                }
            },
        )
        span = self.span  # ended after the log line, which carries its ids
        if route != "unmatched":
            span.update_name(f"{scope['method']} {route}")
            span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", status)
        span.end()
        context.detach(self.token)

    def _annotate(self) -> None:
        answer: Any = None
        if self.body:
            try:
                answer = orjson.loads(self.body)
            except orjson.JSONDecodeError:
                answer = None
        review_id = _params(self.scope).get("review_id") or (
            answer.get("review_id") if isinstance(answer, dict) else None
        )
        if isinstance(review_id, str) and review_id:
            self.review_id = review_id
            self.span.set_attribute(telemetry.REVIEW_ID, review_id)
        if self.status >= 400:
            code = answer.get("code") if isinstance(answer, dict) else None
            self.code = code if isinstance(code, str) else str(self.status)
            telemetry.mark_error(self.code, span=self.span)


def _params(scope: Scope) -> dict[str, Any]:
    params = scope.get("path_params")
    return params if isinstance(params, dict) else {}


router = APIRouter(tags=["operations"], include_in_schema=False)


@router.get("/metrics")
async def metrics_endpoint(request: Request) -> Response:
    """The Prometheus text exposition of this gateway process, unless it is served on its own address
    (``REVIEWLOOP_GATEWAY_METRICS_ADDR``): then the public port does not know it."""
    if request.app.state.settings.metrics_listen:
        raise DomainError(Code.NOT_FOUND, "Not found.")
    probes = [request.app.state.feeds.probe] if hasattr(request.app.state, "feeds") else []
    return Response(await metrics.scrape(probes), media_type=metrics.CONTENT_TYPE)


async def serve_apart(app: Any) -> asyncio.AbstractServer:
    """``/metrics``, ``/livez`` and ``/readyz`` on ``REVIEWLOOP_GATEWAY_METRICS_ADDR``, as each gRPC
    service serves them: a scraper need not reach the public port, nor the public the gauges."""

    async def ready() -> bool:
        return (await not_ready(app)) == []

    return await metrics.serve_http(app.state.settings.metrics_listen, [app.state.feeds.probe], ready)


@router.get("/livez")
async def livez() -> Response:
    """200 while the process answers."""
    return OrjsonResponse({"status": "ok"})


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    """200 when the gateway's store answers and every backend reports SERVING; 503 says what is not."""
    problems = await not_ready(request.app)
    return OrjsonResponse(
        {"status": "ready" if not problems else "not_ready", "not_ready": problems},
        status_code=200 if not problems else 503,
    )


async def not_ready(app: Any) -> list[str]:
    """What keeps the gateway from being ready: ``store``, and each backend not SERVING."""
    problems: list[str] = []
    try:
        async with app.state.db.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception:
        problems.append("store")
    backends = await app.state.backends.health()
    problems += [name for name, status in backends.items() if status != "SERVING"]
    return problems
