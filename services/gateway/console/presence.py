"""Who has a draft open: the review page records its reader (the session's key name) when it renders and
while it stays open, so two reviewers see each other before acting. A record nobody refreshes expires."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta

from fastapi import Request
from starlette.responses import JSONResponse, Response

from gateway import store
from gateway.console import web
from gateway.console.sessions import Session

TTL = timedelta(seconds=45)
# The page refreshes well inside the TTL (and at once when its tab regains focus).
REFRESH_S = 15


def actor(session: Session) -> str:
    return f"{session.name} ({session.principal.actor_kind})"


async def touch(request: Request, session: Session, review_id: str) -> list[str]:
    """Record ``session`` on ``review_id``; who else has it open."""
    async with request.app.state.db.transaction() as uow:
        await store.touch_presence(
            uow.conn, session.principal.project_id, review_id, session.session_id, actor(session), TTL
        )
        seen = await store.present(uow.conn, session.principal.project_id, TTL, review_id)
    return _names(p for p in seen if p.session_id != session.session_id)


async def by_review(request: Request, session: Session) -> dict[str, list[str]]:
    """Who else has each of the project's drafts open (the queue's "Open by" column)."""
    async with request.app.state.db.single_statement.connect() as conn:
        seen = await store.present(conn, session.principal.project_id, TTL)
    grouped: dict[str, list[store.Presence]] = defaultdict(list)
    for p in seen:
        if p.session_id != session.session_id:
            grouped[p.review_id].append(p)
    return {review_id: _names(items) for review_id, items in grouped.items()}


def _names(seen: Iterable[store.Presence]) -> list[str]:
    return list(dict.fromkeys(p.actor for p in seen))


def others_text(others: list[str]) -> str:
    return f"Also open by {', '.join(others)}." if others else "Nobody else has this draft open."


async def refresh(request: Request, review_id: str) -> Response:
    """The open page's heartbeat: who else has the draft open, as JSON. A closed page just stops
    refreshing and expires (an explicit leave would race the next page's own record)."""
    session, _ = await web.writer(request)
    others = await touch(request, session, review_id)
    return JSONResponse({"others": others, "text": others_text(others)})
