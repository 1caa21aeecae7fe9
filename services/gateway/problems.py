"""RFC 9457 problem+json for every failure, with the spec's closed ``code`` and recovery facts."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import grpc
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from reviewloop.errors import Code, DomainError, FieldViolation, status_of, title
from reviewloop.rpc_errors import from_rpc_error
from reviewloop.storage.unavailable import store_unavailable
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match, compile_path

log = logging.getLogger(__name__)

PROBLEM_TYPE_BASE = "https://reviewloop.dev/problems/"
RETRY_AFTER_S = "1"
BODY_TOO_LARGE = "reviewloop.body_too_large"  # set in the ASGI scope when the body limit is hit


# The hints whose value the SDK reads from ``code`` (errors.ts ``hintCode``); every other hint
# (``policy``, ``retry_with``, ``recipient``, ...) carries its value in ``detail`` under the problem's code.
CODE_VALUED_HINTS = frozenset({"state", "revision", "version", "allowed_action", "sent_message_id"})


def hint(name: str, value: object, code: Code) -> dict[str, str]:
    """One recovery fact as the SDK reads it: keyed by ``field``, every value a string."""
    text = str(value)
    if name in CODE_VALUED_HINTS:
        return {"field": name, "code": text, "detail": text}
    return {"field": name, "code": code.value, "detail": text}


# The SDK's ``next_action`` extra: what an agent does next, for the codes whose recovery spec 000 and the
# SDK's retryability table spell out (a retry of the same bytes fixes none of them).
NEXT_ACTIONS: dict[Code, str] = {
    Code.STALE: "reread_and_retry",
    Code.BORN_STALE: "get_rules_and_redraft",
    Code.WRONG_STATE: "use_an_allowed_action",
    Code.TERMINAL: "stop",
    Code.SEND_NEEDS_RECONCILIATION: "wait_for_reconciliation",
    Code.INTENT_REQUIRED: "add_intent_and_resubmit",
    Code.REPLY_CONTEXT_CHANGED: "reread_thread_and_recompose",
    Code.IDEMPOTENCY_CONFLICT: "use_a_new_idempotency_key",
    Code.UNAVAILABLE: "retry_after",
    Code.RATE_LIMITED: "retry_after",
}


# A reply's thread as it now is (``reply_context_changed``): what the agent re-reads before recomposing.
THREAD_HINTS = frozenset({"thread_id", "context_version", "last_message_id"})


def current_state(error: DomainError) -> dict[str, Any] | None:
    """The SDK's ``current_state`` extra: the review (or a reply's thread) as it now is, as one object
    (the same facts as the ``errors[]`` hints, typed), or None when the error names no state."""
    facts: dict[str, Any] = {
        "state": error.state,
        "revision": error.revision,
        "version": error.version,
        "sent_message_id": error.sent_message_id,
        **{name: value for name, value in error.hints if name in THREAD_HINTS},
    }
    if error.allowed_actions:
        facts["allowed_actions"] = list(error.allowed_actions)
    present = {name: value for name, value in facts.items() if value is not None}
    return present or None


def problem_body(error: DomainError, status: int, request_id: str | None = None) -> dict[str, Any]:
    errors: list[dict[str, Any]] = [
        {"field": v.field, "code": error.code.value, "detail": v.description} for v in error.violations
    ]
    facts: list[tuple[str, Any]] = [
        ("state", error.state),
        ("revision", error.revision),
        ("version", error.version),
        ("sent_message_id", error.sent_message_id),
        *(("allowed_action", verb) for verb in error.allowed_actions),
        *error.hints,
    ]
    errors += [hint(name, value, error.code) for name, value in facts if value is not None]
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + error.code.value,
        "title": title(error.code),
        "status": status,
        "detail": error.detail,
        "code": error.code.value,
    }
    if errors:
        body["errors"] = errors
    if error.code in NEXT_ACTIONS:
        body["next_action"] = NEXT_ACTIONS[error.code]
    if (state := current_state(error)) is not None:
        body["current_state"] = state
    if error.unsent_text is not None:
        body["unsent_text"] = error.unsent_text
    if request_id:
        body["request_id"] = request_id
    return body


def problem_response(
    error: DomainError,
    request: Request | None = None,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The problem for ``error``; ``status`` overrides its usual HTTP status (``errors.status_of``)."""
    request_id = request.headers.get("x-request-id") if request is not None else None
    headers = dict(headers or {})
    if error.code is Code.UNAVAILABLE:
        headers["Retry-After"] = RETRY_AFTER_S
    elif error.code is Code.RATE_LIMITED:  # the seconds left in the window the caller is past
        headers["Retry-After"] = dict(error.hints).get("retry_after", RETRY_AFTER_S)
    status = status or status_of(error)
    return Response(
        orjson.dumps(problem_body(error, status, request_id)),
        status_code=status,
        media_type="application/problem+json",
        headers=headers,
    )


def body_too_large(limit: int) -> DomainError:
    """A body over the limit: ``bad_request`` naming the whole body (pointer ``""``), answered 413."""
    description = f"the request body exceeds {limit} bytes"
    return DomainError(
        Code.BAD_REQUEST,
        f"The request body exceeds {limit} bytes; send a smaller one.",
        violations=(FieldViolation("", description),),
        status=413,
    )


def _pointer(loc: tuple[Any, ...]) -> str:
    parts = (
        [str(p) for p in loc[1:]]
        if loc and loc[0] in ("body", "query", "path", "header")
        else list(map(str, loc))
    )
    return "/" + "/".join(parts)


def validation_error(exc: RequestValidationError | ValidationError) -> DomainError:
    """A body (or a console form read as the same shape) with bad fields: 422 naming each field."""
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return DomainError(Code.BAD_REQUEST, "The request body is not valid JSON; send a JSON object.")
    violations = tuple(
        FieldViolation(_pointer(tuple(e.get("loc", ()))), str(e.get("msg", "invalid"))) for e in errors
    )
    detail = "; ".join(f"{v.field}: {v.description}" for v in violations) or "The request is invalid."
    return DomainError(Code.BAD_REQUEST, detail, violations=violations)


# Refusals that say for certain nothing was sent (an unavailable or failed backend leaves that open).
UNCERTAIN = frozenset({Code.UNAVAILABLE, Code.INTERNAL})


def refused_send(exc: grpc.aio.AioRpcError, text: str) -> Exception:
    """A backend's refusal of a send as the SDK reads it: with the body it did not send (``unsent_text``)."""
    try:
        error = from_rpc_error(exc)
    except ValueError:
        return exc
    if error.code in UNCERTAIN:
        return exc
    error.unsent_text = text
    return error


def backend_error(exc: grpc.aio.AioRpcError) -> DomainError:
    """The DomainError a backend raised. A status that outgrows gRPC's metadata limits arrives as
    RESOURCE_EXHAUSTED, with its packed details mismatched (soft limit) or dropped (hard limit); the only
    statuses that large are validation errors naming very many fields, so say that rather than 500."""
    try:
        error = from_rpc_error(exc)
    except ValueError:
        error = DomainError(Code.INTERNAL, "The server failed to handle the request.")
    if error.code is Code.INTERNAL and exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
        log.warning("a backend error outgrew the gRPC metadata limit: %s", exc.details())
        return DomainError(
            Code.BAD_REQUEST,
            "The request is invalid in more places than one answer can carry; "
            "check it against the operation's schema in /openapi.yaml and send fewer items.",
            status=422,  # a validation error, like every other (errors.status_of)
        )
    return error


_HTTP_CODES = {
    401: Code.UNAUTHORIZED,
    403: Code.FORBIDDEN_SCOPE,
    404: Code.NOT_FOUND,
    405: Code.BAD_REQUEST,
}


_HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def allowed_methods(request: Request) -> str:
    """Every method the request's path takes, as an ``Allow`` value: those the OpenAPI document gives the
    path (FastAPI keeps an included router's routes nested, out of ``router.routes``' reach), and those of
    the app's own routes that match it (pages left out of the document)."""
    app = request.app
    documented: list[tuple[Any, set[str]]] | None = getattr(app.state, "documented_methods", None)
    if documented is None:
        documented = app.state.documented_methods = [
            (compile_path(path)[0], {method.upper() for method in item if method in _HTTP_METHODS})
            for path, item in app.openapi().get("paths", {}).items()
        ]
    path = request.scope["path"]
    methods = {method for pattern, each in documented if pattern.match(path) for method in each}
    scope = {**request.scope, "method": ""}
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    """Register the handlers that turn every failure into problem+json."""

    @app.exception_handler(DomainError)
    async def domain(request: Request, exc: DomainError) -> Response:
        return problem_response(exc, request)

    @app.exception_handler(grpc.aio.AioRpcError)
    async def backend(request: Request, exc: grpc.aio.AioRpcError) -> Response:
        error = backend_error(exc)
        if error.code is Code.INTERNAL:
            log.error("backend error: %s %s", exc.code(), exc.details())
            error = DomainError(Code.INTERNAL, "The server failed to handle the request.")
        return problem_response(error, request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        # Malformed JSON is a 400; a well-formed body with bad fields is a 422 naming each field.
        return problem_response(validation_error(exc), request)

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, exc: StarletteHTTPException) -> Response:
        if request.scope.get(BODY_TOO_LARGE):
            return problem_response(body_too_large(request.app.state.settings.max_body_bytes), request)
        code = _HTTP_CODES.get(exc.status_code, Code.BAD_REQUEST)
        detail = (
            str(exc.detail) if exc.status_code != 404 else f"No route {request.method} {request.url.path}."
        )
        headers = exc.headers
        if exc.status_code == 405:
            # RFC 9110: Allow lists every method the resource takes. Starlette names only the first route
            # that matched the path, and a path's methods are often routes of their own.
            headers = {**(headers or {}), "Allow": allowed_methods(request)}
            detail = f"{request.url.path} does not take {request.method}; it takes {headers['Allow']}."
        return problem_response(DomainError(code, detail), request, exc.status_code, headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        if store_unavailable(exc):  # the gateway's own store (keys, limits, sessions): retry, not a bug
            log.warning("store not answering on %s %s: %s", request.method, request.url.path, exc)
            return problem_response(
                DomainError(Code.UNAVAILABLE, "The gateway's store is not answering; retry shortly."), request
            )
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(
            DomainError(Code.INTERNAL, "The server failed to handle the request."), request
        )
