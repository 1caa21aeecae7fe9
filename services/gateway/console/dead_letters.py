"""Admin page "Dead letters": the project's events a receiver refused for good, across every service, with
the reason; retry one once its cause is fixed (it goes back to its relay) or discard it with a reason.
The same commands as ``/v1/admin/projects/{id}/dead-letters`` (``gateway.commands.outbox``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from reviewloop.shapes import DiscardIn
from starlette.responses import Response

from gateway.commands import outbox as commands
from gateway.console import admin, web
from gateway.console.html import page, render
from gateway.translate.outbox import as_dead_letter

router = APIRouter()
PATH = "/console/dead-letters"


@router.get("/dead-letters")
async def dead_letters_page(request: Request) -> Response:
    session = await admin.reader(request)
    letters = [
        as_dead_letter(x) for x in await web.backend(request).dead_letters(session.principal.to_proto())
    ]
    body = render(
        "dead_letters.html",
        session=session,
        letters=letters,
        path=PATH,
        done=request.query_params.get("done", ""),
    )
    return page("Dead letters", body, session=session, active="dead-letters")


@router.post("/dead-letters/{event_id}/retry")
async def retry(request: Request, event_id: str) -> Response:
    session, _ = await admin.writer(request)
    await commands.retry_dead_letter(web.backend(request), session.principal, event_id)
    return admin.done(PATH, "dead_letter_retried")


@router.post("/dead-letters/{event_id}/discard")
async def discard(request: Request, event_id: str) -> Response:
    session, form = await admin.writer(request)
    reason = web.shaped(DiscardIn, reason=web.field(form, "reason"))
    await commands.discard_dead_letter(web.backend(request), session.principal, event_id, reason)
    return admin.done(PATH, "dead_letter_discarded")
