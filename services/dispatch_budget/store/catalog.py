"""The review selection catalog (runners), the project review configuration, and the review
lineages' sessions (spec 003)."""

from __future__ import annotations

from typing import Any

from reviewloop.records import from_row, to_columns
from reviewloop.review_dispatch.selection import ReviewMode, RunnerSpec
from sqlalchemy import ColumnElement, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget.domain.lineage import ReviewSession
from dispatch_budget.domain.qualifying import SessionFacts
from dispatch_budget.store.documents import ProjectDocument
from dispatch_budget.store.tables import review_configs, review_sessions, runners

# --- runners ---


async def runner_catalog(conn: AsyncConnection, project_id: str) -> dict[str, RunnerSpec]:
    """The project's runners by name."""
    rows = (await conn.execute(select(runners.c.spec).where(runners.c.project_id == project_id))).all()
    return {row.spec["name"]: RunnerSpec.from_json(row.spec) for row in rows}


async def save_runner(conn: AsyncConnection, project_id: str, spec: RunnerSpec) -> None:
    """Register the runner, replacing one of the same name."""
    r = runners.c
    await conn.execute(runners.delete().where(r.project_id == project_id, r.name == spec.name))
    await conn.execute(runners.insert().values(project_id=project_id, name=spec.name, spec=spec.to_json()))


# --- the project review configuration ---


# The project review configuration an admin stored (spec 003's project defaults).
review_config = ProjectDocument(review_configs)


# --- review sessions ---


def _session(row: Any) -> ReviewSession:
    return from_row(ReviewSession, row, mode=ReviewMode(row.mode), lease_id=row.lease_id or "")


async def add_review_session(conn: AsyncConnection, project_id: str, session: ReviewSession) -> None:
    columns = to_columns(session, project_id=project_id, mode=session.mode.value)
    await conn.execute(review_sessions.insert().values(columns))


async def lock_lineage_head(conn: AsyncConnection, project_id: str, review_id: str) -> ReviewSession | None:
    """The lineage's latest session, locked until the transaction ends; None for an unknown lineage."""
    s = review_sessions.c
    return await _locked_session(conn, project_id, s.review_id == review_id, newest_by=s.created_at.desc())


async def review_session(conn: AsyncConnection, project_id: str, session_id: str) -> ReviewSession | None:
    """The session, locked until the transaction ends (a heartbeat or completion races a rebind)."""
    return await _locked_session(conn, project_id, review_sessions.c.session_id == session_id)


async def _locked_session(
    conn: AsyncConnection,
    project_id: str,
    criterion: ColumnElement[bool],
    newest_by: ColumnElement[Any] | None = None,
) -> ReviewSession | None:
    """The project's session ``criterion`` picks (the newest by ``newest_by``), locked until the
    transaction ends; None when there is none."""
    query = select(review_sessions).where(review_sessions.c.project_id == project_id, criterion)
    if newest_by is not None:
        query = query.order_by(newest_by).limit(1)
    row = (await conn.execute(query.with_for_update())).first()
    return _session(row) if row is not None else None


async def rebind_review_session(conn: AsyncConnection, session: ReviewSession) -> None:
    """A WARM binding: the session is busy reviewing its new range, maybe with another model/effort."""
    await conn.execute(
        update(review_sessions)
        .where(review_sessions.c.session_id == session.session_id)
        .values(
            busy=True,
            model=session.model,
            effort=session.effort,
            mode=session.mode.value,
            range_base=session.range_base,
            range_head=session.range_head,
            lease_id=session.lease_id,
            lease_expires_at=session.lease_expires_at,
        )
    )


async def complete_review_session(conn: AsyncConnection, session: ReviewSession) -> None:
    """The session reviewed its range: no longer busy, and its reviewed head recorded."""
    await conn.execute(
        update(review_sessions)
        .where(review_sessions.c.session_id == session.session_id)
        .values(
            busy=False, last_reviewed_head=session.last_reviewed_head, lease_id=None, lease_expires_at=None
        )
    )


async def renew_review_session(conn: AsyncConnection, session: ReviewSession) -> None:
    await conn.execute(
        update(review_sessions)
        .where(review_sessions.c.session_id == session.session_id)
        .values(lease_expires_at=session.lease_expires_at)
    )


async def session_facts(
    conn: AsyncConnection, project_id: str, session_ids: list[str]
) -> dict[str, SessionFacts]:
    """The bound reviewer sessions among ``session_ids``, as the gate verifies them."""
    if not session_ids:
        return {}
    s = review_sessions.c
    rows = (
        await conn.execute(
            select(
                s.session_id, s.repository, s.pr_number, s.runner, s.model, s.effort, s.mode, s.base_sha
            ).where(s.project_id == project_id, s.session_id.in_(sorted(set(session_ids))))
        )
    ).all()
    return {
        row.session_id: SessionFacts(
            row.session_id,
            row.repository,
            int(row.pr_number),
            row.runner,
            row.model,
            row.effort,
            row.mode,
            row.base_sha,
        )
        for row in rows
    }
