"""What every console page shares: its session, its form, its backends, its errors."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote

import grpc
from fastapi import Request
from pydantic import ValidationError
from reviewloop.errors import Code, DomainError
from starlette.datastructures import FormData
from starlette.responses import Response

from gateway import store
from gateway.backends import Backends
from gateway.console.sessions import Session, check_csrf, current
from gateway.problems import backend_error, validation_error

T = TypeVar("T")
S = TypeVar("S")


class SignInRequired(Exception):
    """No live session: the handler sends the browser to sign in and back to ``next``."""

    def __init__(self, next_url: str) -> None:
        self.next_url = next_url


def sign_in_url(next_url: str) -> str:
    return f"/console/sign-in?next={quote(next_url, safe='')}"


def safe_next(value: str | None) -> str:
    """Only a console path may be a post-sign-in target (no open redirect)."""
    if value and value.startswith("/console/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/console/queue"


async def reader(request: Request) -> Session:
    session = await current(request, write=False)
    if session is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(target)
    return session


async def writer(request: Request) -> tuple[Session, FormData]:
    """A write: the Strict cookie's session and a form whose CSRF token is bound to it."""
    session = await current(request, write=True)
    if session is None:
        raise SignInRequired("/console/queue")
    form = await request.form()
    check_csrf(session, str(form.get("csrf", "")))
    return session, form


def require_admin(session: Session) -> None:
    if not session.is_admin:
        raise DomainError(Code.FORBIDDEN_SCOPE, "This page is for admin keys; sign in with an admin key.")


def backend(request: Request) -> Backends:
    backends: Backends = request.app.state.backends
    return backends


def field(form: FormData, name: str, default: str = "") -> str:
    value = form.get(name, default)
    return value if isinstance(value, str) else default


def number(form: FormData, name: str) -> int:
    text = field(form, name)
    if not text.strip().lstrip("-").isdigit():
        raise DomainError(Code.BAD_REQUEST, f"{name} must be a whole number.")
    return int(text)


def idempotency_key() -> str:
    """A fresh key per rendered form: a double submit of one form acts once (the services dedupe)."""
    return uuid.uuid4().hex


REFUSALS = (DomainError, grpc.aio.AioRpcError)


def as_domain(error: Exception) -> DomainError:
    if isinstance(error, DomainError):
        return error
    if isinstance(error, grpc.aio.AioRpcError):
        return backend_error(error)
    raise error


def shaped(shape: Callable[..., S], **fields: Any) -> S:
    """A form as its verb's shape (the REST body the command takes): a field the shape refuses is the
    route's 422, naming the field."""
    try:
        return shape(**fields)
    except ValidationError as exc:
        raise validation_error(exc) from None


def seen_at(form: FormData, shape: Callable[..., S]) -> S:
    """The (revision, version) a form names, as its verb's shape (open, undo)."""
    return shaped(shape, revision=number(form, "revision"), version=number(form, "version"))


async def call(rpc: Any, message: Any, request: Request) -> Any:
    return await rpc(message, timeout=backend(request).timeout_s)


async def act(
    work: Callable[[], Awaitable[T]],
    then: Response | Callable[[T], Awaitable[Response]],
    refused: Callable[[DomainError], Awaitable[Response]],
) -> Response:
    """Every console action: ``work`` reads the form and calls the backend; a refusal (nothing changed)
    answers ``refused`` (the page again, saying why and keeping what was typed), else ``then`` (given
    what ``work`` answered)."""
    try:
        result = await work()
    except REFUSALS as exc:
        return await refused(as_domain(exc))
    return then if isinstance(then, Response) else await then(result)


def typed(form: FormData | None, form_id: str) -> Callable[[str, str], str]:
    """What a field shows: what the reviewer typed when the page renders again after its form
    (named by a hidden ``form`` field) was refused, else the value the page has."""
    if form is None or field(form, "form") != form_id:
        return lambda name, shown: shown
    return lambda name, shown: field(form, name, shown)


class Actors:
    """Who acted, as the console names them: the key's name and its kind ("sam (admin)"), looked up in
    the project's keys (an agent key by its agent id as well). A turn records an admin as a human, so
    the kind comes from the key, not the turn."""

    def __init__(self, keys: list[store.ApiKey]) -> None:
        self.by_id: dict[str, str] = {}
        for key in keys:
            label = f"{key.name or key.key_id} ({key.actor_kind})"
            self.by_id[key.key_id] = label
            if key.agent_id:
                self.by_id.setdefault(key.agent_id, label)
        self.by_id.setdefault("bootstrap", "bootstrap token (admin)")

    def name(self, actor_id: str, actor_kind: str = "") -> str:
        if actor_id in self.by_id:
            return self.by_id[actor_id]
        if actor_kind == "system" or not actor_id:
            return f"reviewloop ({actor_kind or 'system'})"
        return f"{actor_id} ({actor_kind})" if actor_kind else actor_id


async def actors(request: Request, session: Session) -> Actors:
    """The project's keys as names (one statement on the gateway's own store)."""
    async with request.app.state.db.single_statement.connect() as conn:
        return Actors(await store.project_keys(conn, session.principal.project_id))
