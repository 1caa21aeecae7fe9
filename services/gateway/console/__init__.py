"""The reviewer console: server-rendered pages at ``/console`` where humans review, edit, teach and
graduate (issue 16). It is a sub-application of the gateway sharing its state (store, backends,
settings), so every action goes through the same gRPC calls, authority and idempotency as the JSON routes.

Modules: ``sessions`` (sign-in, cookies, CSRF), ``web`` (what every page shares), ``html`` (the
templates' environment, the page frame and the one keymap; the markup is in ``templates/``), ``queue``
(the queue and its live events; its reads in ``queue_view``), ``batch`` (batch decisions and their undo),
``review`` (the review page and its actions, delivery resolution; its view data in ``review_view``),
``undo`` (the undo window), ``presence`` (who has a draft open), ``rules_page``, ``categories``,
``settings`` and ``budgets`` (the admin pages; ``admin`` what they share), ``dead_letters`` (events a
receiver refused for good), ``sequence`` (a run's review sequence, through the shared picker),
``warnings`` (what rendered mail hides), ``static/`` (one CSS, one JS file). Every page calls the
gateway's commands (``gateway.commands``), as the REST routes do; none builds a gRPC request.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import grpc
from fastapi import APIRouter, FastAPI, Request
from reviewloop.errors import Code, DomainError, http_status
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from gateway.console import (
    batch,
    budgets,
    categories,
    dead_letters,
    dial_effect,
    queue,
    review,
    rules_page,
    sequence,
    sessions,
    settings,
    throttle,
    undo,
    web,
)
from gateway.console.html import SECURITY_HEADERS, page, render

STATIC = Path(__file__).parent / "static"


# The pages, by module; ``door`` (below) is sign-in and sign-out.
PAGES = (
    queue,
    batch,
    review,
    undo,
    rules_page,
    categories,
    settings,
    budgets,
    dead_letters,
    dial_effect,
    sequence,
)
door = APIRouter()


def create_console(state: object) -> FastAPI:
    """The console app, to be mounted at ``/console``; ``state`` is the gateway's ``app.state``."""
    # No telemetry of its own: the gateway's request span, metric and access log cover every console
    # request (a second SERVER span and per-dependency spans would only add cost).
    console = FastAPI(
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    console.state = state  # type: ignore[assignment]
    console.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in PAGES:
        console.include_router(module.router)
    console.include_router(door)
    console.add_exception_handler(web.SignInRequired, _sign_in_required)  # type: ignore[arg-type]
    console.add_exception_handler(DomainError, _error_page)  # type: ignore[arg-type]
    console.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    console.add_exception_handler(grpc.aio.AioRpcError, _backend_error)  # type: ignore[arg-type]
    return console


async def _sign_in_required(request: Request, exc: web.SignInRequired) -> Response:
    return RedirectResponse(web.sign_in_url(exc.next_url), status_code=303)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """A mistyped or stale console link answers a console page (with the way back), not JSON."""
    if exc.status_code == 404:
        return await _error_page(
            request, DomainError(Code.NOT_FOUND, f"No console page at {request.url.path}.")
        )
    return page(
        "Something stopped",
        render("error.html", message=str(exc.detail), not_found=False, back=""),
        status=exc.status_code,
        extra_headers=dict(exc.headers or {}),
    )


async def _backend_error(request: Request, exc: grpc.aio.AioRpcError) -> Response:
    return await _error_page(request, web.as_domain(exc))


@door.get("/")
async def home() -> Response:
    return RedirectResponse("/console/queue", status_code=303)


@door.get("/sign-in")
async def sign_in_form(request: Request) -> Response:
    return _sign_in_page(web.safe_next(request.query_params.get("next")))


@door.post("/sign-in")
async def sign_in(request: Request) -> Response:
    if throttle.cross_site(request):
        # Before the form is even read: a forged sign-in sets no cookie.
        return _sign_in_page(
            "/console/queue",
            "Refused: a sign-in must be sent from this console's own sign-in page, not another site.",
            status=403,
        )
    form = await request.form()
    target = web.safe_next(web.field(form, "next"))
    response = RedirectResponse(target, status_code=303)
    try:
        attempts = throttle.SignInThrottle(request.app.state.db)
        await attempts.attempt(request.client.host if request.client else "", web.field(form, "key"))
        await sessions.sign_in(request, response, web.field(form, "key"))
    except DomainError as error:
        refused = _sign_in_page(target, error.detail, status=http_status(error.code))
        retry_after = dict(error.hints).get("retry_after")
        if retry_after is not None:
            refused.headers["Retry-After"] = retry_after
        return refused
    response.headers.update(SECURITY_HEADERS)
    return response


@door.post("/sign-out")
async def sign_out(request: Request) -> Response:
    session, _ = await web.writer(request)
    response = RedirectResponse("/console/sign-in", status_code=303)
    await sessions.sign_out(request, response, session)
    return response


def _sign_in_page(next_url: str, error: str = "", status: int = 200) -> Response:
    return page("Sign in", render("sign_in.html", next_url=next_url, error=error), status=status)


async def _error_page(request: Request, error: DomainError) -> Response:
    """The refusal, with the console's navigation while the browser is signed in, and a way back to
    the page whose form was refused (its same-origin Referer)."""
    try:
        session = await sessions.current(request, write=False)
    except Exception:  # the refusal is what the reader needs; a session lookup failing must not hide it
        session = None
    status = http_status(error.code)
    referer = urlsplit(request.headers.get("referer", ""))
    came_from = web.safe_next(referer.path + (f"?{referer.query}" if referer.query else ""))
    back = came_from if request.method == "POST" and came_from != "/console/queue" else ""
    return page(
        "Something stopped",
        render("error.html", message=error.detail, not_found=error.code is Code.NOT_FOUND, back=back),
        session=session,
        status=status,
    )
