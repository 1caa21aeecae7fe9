"""Console routes over every service's outbox: a project's dead letters (events a receiver refused for
good), retried once their cause is fixed or discarded with a reason (admin key or the bootstrap token).
Each service keeps its own outbox; ``Backends`` gathers them and finds the one that holds an event."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from reviewloop.shapes import DeadLetter, DeadLetterList, DiscardIn

from gateway.auth import Caller, console_principal, require_admin
from gateway.backends import Backends, backends
from gateway.commands import outbox as commands
from gateway.responses import ShapedRoute
from gateway.translate import Json
from gateway.translate.outbox import as_dead_letter

router = APIRouter(tags=["operations", "console"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
Admin = Annotated[Caller, Depends(require_admin)]


@router.get(
    "/v1/admin/projects/{project_id}/dead-letters",
    operation_id="list_dead_letters",
    response_model=DeadLetterList,
)
async def list_dead_letters(project_id: str, caller: Admin, request: Request, backend: Backend) -> Json:
    """The project's dead letters across every service, newest first: what was refused, by whom, and why."""
    principal = await console_principal(caller, request, project_id)
    letters = await backend.dead_letters(principal.to_proto())
    return {"dead_letters": [as_dead_letter(letter) for letter in letters]}


@router.post(
    "/v1/admin/projects/{project_id}/dead-letters/{event_id}/retry",
    operation_id="retry_dead_letter",
    response_model=DeadLetter,
)
async def retry_dead_letter(
    project_id: str, event_id: str, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Hand a dead letter back to its service's relay once its cause is fixed: it is delivered as if new
    (the receiver deduplicates, so it is never taken twice). Answers the letter as it was."""
    principal = await console_principal(caller, request, project_id)
    return as_dead_letter(await commands.retry_dead_letter(backend, principal, event_id))


@router.post(
    "/v1/admin/projects/{project_id}/dead-letters/{event_id}/discard",
    operation_id="discard_dead_letter",
    response_model=DeadLetter,
)
async def discard_dead_letter(
    project_id: str, event_id: str, body: DiscardIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Give up on a dead letter: it is never delivered, and kept with the reason until pruned."""
    principal = await console_principal(caller, request, project_id)
    return as_dead_letter(await commands.discard_dead_letter(backend, principal, event_id, body))
