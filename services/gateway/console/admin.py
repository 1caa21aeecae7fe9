"""What the admin pages share (rules, categories, settings, budgets, review sequence): admin keys only, each
acting within its own project; a form's verb is the REST route's command, given the route's body shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from reviewloop.errors import DomainError, http_status
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from gateway.commands.rules import list_categories
from gateway.console import web
from gateway.console.sessions import Session
from gateway.translate.rules import as_category


async def reader(request: Request) -> Session:
    session = await web.reader(request)
    web.require_admin(session)
    return session


async def writer(request: Request) -> tuple[Session, FormData]:
    session, form = await web.writer(request)
    web.require_admin(session)
    return session, form


def done(path: str, message: str) -> Response:
    return RedirectResponse(f"{path}?{urlencode({'done': message})}", status_code=303)


# A page that renders again after one of its forms was refused: ``form`` is what was posted.
View = Callable[..., Awaitable[Response]]


def again(
    view: View, request: Request, session: Session, form: FormData
) -> Callable[[DomainError], Awaitable[Response]]:
    """A refused admin form answers its page again, saying why, with what was typed kept in that form."""
    return lambda error: view(request, session, form=form, error=error)


def status(error: DomainError | None) -> int:
    return 200 if error is None else http_status(error.code)


async def categories(request: Request, session: Session) -> list[dict[str, Any]]:
    reply = await list_categories(web.backend(request), session.principal)
    return [as_category(c) for c in reply.categories]


def as_json(text: str, kind: type) -> object:
    """A form's text as the JSON value its shape's field takes (a number, a boolean). Text that is none
    goes as typed, so the shape refuses it as the REST route refuses that body."""
    try:
        if kind is bool:
            return {"true": True, "false": False}[text]
        return kind(text)
    except (KeyError, ValueError):
        return text
