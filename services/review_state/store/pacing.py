"""Backlog reconciliation and pacing: stale drafts (held from release, nudged a window at a time) and
each category's pacing window, in the domain's words."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from reviewloop.storage.schema import insert_new
from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.domain.machine import PENDING, State
from review_state.domain.pacing import StaleDraft, Window
from review_state.domain.review import Review
from review_state.store.attempts import WAITING
from review_state.store.reviews import _from_row, in_scope
from review_state.store.tables import delivery_attempts, pacing_windows, reviews, stale_drafts, turns

_PENDING = [s.value for s in PENDING]
_STALE_COLUMNS = tuple(StaleDraft.__dataclass_fields__)


_REQUIRED = select(stale_drafts.c.required_high_water).where(
    stale_drafts.c.review_id == bindparam("review_id")
)
_TAKE = (
    delete(stale_drafts)
    .where(stale_drafts.c.review_id == bindparam("review_id"))
    .returning(*(stale_drafts.c[name] for name in _STALE_COLUMNS))
)


def _stale(row: Any) -> StaleDraft:
    return StaleDraft(**{name: row._mapping[name] for name in _STALE_COLUMNS})


def _window(row: Any) -> Window:
    return Window(**{name: row._mapping[name] for name in Window.__dataclass_fields__})


async def mark_stale(conn: AsyncConnection, org_id: str, drafts: Sequence[StaleDraft]) -> None:
    """Record each draft as stale against its ``required_high_water`` (a draft already stale keeps the
    higher one, the latest rule, and its slot), and open a pacing window for each category touched."""
    if not drafts:
        return
    ids = [d.review_id for d in drafts]
    known = {
        row.review_id: row.required_high_water
        for row in await conn.execute(
            select(stale_drafts.c.review_id, stale_drafts.c.required_high_water).where(
                stale_drafts.c.review_id.in_(ids)
            )
        )
    }
    fresh = [d.__dict__ for d in drafts if d.review_id not in known]
    if fresh:
        await insert_new(conn, stale_drafts, fresh)
    for draft in drafts:
        if draft.review_id in known and draft.required_high_water > known[draft.review_id]:
            await conn.execute(
                update(stale_drafts)
                .where(stale_drafts.c.review_id == draft.review_id)
                .values(
                    required_high_water=draft.required_high_water,
                    rule=draft.rule,
                    reason=draft.reason,
                    propagate=draft.propagate,
                    suggested_batch=draft.suggested_batch,
                )
            )
    await open_windows(conn, org_id, drafts)


async def lift(conn: AsyncConnection, org_id: str, lineage_id: str) -> int:
    """Hold no draft of ``org_id`` against the rule of ``lineage_id`` any more (it was taken back): the
    rows whose latest rule is that lineage's go, with their slots. A draft a later rule raised stays
    held by that one. How many were lifted."""
    rows = await conn.execute(
        select(stale_drafts.c.review_id, stale_drafts.c.rule)
        .join(reviews, reviews.c.id == stale_drafts.c.review_id)
        .where(reviews.c.org_id == org_id)
    )
    lifted = [row.review_id for row in rows if (row.rule or {}).get("lineage_id") == lineage_id]
    if lifted:
        await conn.execute(delete(stale_drafts).where(stale_drafts.c.review_id.in_(lifted)))
    return len(lifted)


async def open_windows(conn: AsyncConnection, org_id: str, drafts: Sequence[StaleDraft]) -> None:
    """A pacing window for each category of ``drafts`` that has none yet."""
    for project_id, category_id in sorted({(d.project_id, d.category_id) for d in drafts}):
        values = Window(project_id, category_id, org_id).__dict__
        await insert_new(conn, pacing_windows, values)


async def releases_in_window(
    conn: AsyncConnection, *, org_id: str, project_id: str, category_id: str, agent_id: str
) -> list[tuple[Review, dict[str, Any]]]:
    """The approved drafts in scope whose release still waits out its undo window, unclaimed, each with
    what its decision found (``domain.undo.snapshot``). Their attempt rows stay locked until commit
    (PostgreSQL): an undo or a claim of one waits for this unit, then finds what it wrote."""
    query = (
        select(reviews, delivery_attempts.c.restore.label("attempt__restore"))
        .join(delivery_attempts, delivery_attempts.c.review_id == reviews.c.id)
        .where(
            *in_scope(org_id=org_id, project_id=project_id, category_id=category_id, agent_id=agent_id),
            reviews.c.state == State.APPROVED.value,
            WAITING,
        )
        .order_by(reviews.c.id)
        .with_for_update(of=delivery_attempts)
    )
    rows = (await conn.execute(query)).all()
    return [(_from_row(r), dict(r._mapping["attempt__restore"] or {})) for r in rows]


async def keep_for_undo(conn: AsyncConnection, review_id: str, kept: dict[str, Any]) -> None:
    """What an undo of the waiting release of ``review_id`` writes back is now ``kept``."""
    await conn.execute(
        update(delivery_attempts)
        .where(delivery_attempts.c.review_id == review_id, WAITING)
        .values(restore=kept)
    )


async def required_high_water(conn: AsyncConnection, review_id: str) -> int | None:
    """The rule high-water the stale draft ``review_id`` must be redrafted or restamped to; None when
    it is not stale."""
    required = await conn.scalar(_REQUIRED, {"review_id": review_id})
    return None if required is None else int(required)


async def take(conn: AsyncConnection, review_id: str) -> StaleDraft | None:
    """Forget ``review_id`` as stale, whatever its high-water; the row it had, or None. One statement:
    a caller that must refuse on the row raises, and its unit of work rolls the delete back."""
    row = (await conn.execute(_TAKE, {"review_id": review_id})).first()
    return _stale(row) if row else None


async def restore(conn: AsyncConnection, row: StaleDraft, *, released: bool) -> None:
    """Put back the stale ``row`` of an undone release; ``released``: the release took it (``take``,
    ``release``), so its release comes back off its window's count (``free`` advanced it)."""
    await insert_new(conn, stale_drafts, row.__dict__)
    if not released:
        return
    await conn.execute(
        update(pacing_windows)
        .where(
            pacing_windows.c.project_id == row.project_id,
            pacing_windows.c.category_id == row.category_id,
            pacing_windows.c.cursor_advanced_count > 0,
        )
        .values(cursor_advanced_count=pacing_windows.c.cursor_advanced_count - 1)
    )


async def release(conn: AsyncConnection, review: Review) -> StaleDraft | None:
    """Forget ``review`` as stale if it left pending or now reaches its required high-water; the row
    it had, or None."""
    if review.state not in PENDING:
        return await take(conn, review.id)
    query = select(stale_drafts).where(
        stale_drafts.c.review_id == review.id,
        stale_drafts.c.required_high_water <= review.rule_high_water,
    )
    row = (await conn.execute(query)).first()
    if row is None:
        return None
    await conn.execute(delete(stale_drafts).where(stale_drafts.c.review_id == review.id))
    return _stale(row)


async def get_window(
    conn: AsyncConnection, project_id: str, category_id: str, *, lock: bool = False, skip_locked: bool = False
) -> Window | None:
    """The category's window; ``lock`` holds it until commit (PostgreSQL), so one refill runs at a
    time; with ``skip_locked`` a window another replica is refilling reads as None."""
    query = select(pacing_windows).where(
        pacing_windows.c.project_id == project_id, pacing_windows.c.category_id == category_id
    )
    if lock:
        query = query.with_for_update(skip_locked=skip_locked)
    row = (await conn.execute(query)).first()
    return _window(row) if row else None


async def save_window(conn: AsyncConnection, window: Window) -> None:
    await conn.execute(
        update(pacing_windows)
        .where(
            pacing_windows.c.project_id == window.project_id,
            pacing_windows.c.category_id == window.category_id,
        )
        .values(**window.__dict__)
    )


def _in_category(project_id: str, category_id: str) -> Any:
    return (stale_drafts.c.project_id == project_id) & (stale_drafts.c.category_id == category_id)


async def counts(conn: AsyncConnection, project_id: str, category_id: str) -> tuple[int, int]:
    """(stale, of them in flight) in the category."""
    stale, in_flight = (
        await conn.execute(
            select(func.count(), func.count(stale_drafts.c.nudged_at)).where(
                _in_category(project_id, category_id)
            )
        )
    ).one()
    return int(stale), int(in_flight)


async def waiting(
    conn: AsyncConnection, project_id: str, category_id: str, limit: int, *, lock: bool = False
) -> list[tuple[Review, StaleDraft]]:
    """The category's stale drafts still owed their nudge, oldest first. ``lock`` takes their rows so no
    nudge lands after a review's terminal one; a draft another writer holds is skipped this time."""
    query = (
        select(reviews, *(stale_drafts.c[name].label(f"stale__{name}") for name in _STALE_COLUMNS))
        .join(stale_drafts, stale_drafts.c.review_id == reviews.c.id)
        .where(
            _in_category(project_id, category_id),
            stale_drafts.c.nudged_at.is_(None),
            stale_drafts.c.propagate.is_(True),
            reviews.c.state.in_(_PENDING),
        )
        .order_by(reviews.c.id)
        .limit(limit)
    )
    if lock:
        query = query.with_for_update(skip_locked=True)
    rows = (await conn.execute(query)).all()
    return [
        (_from_row(row), StaleDraft(**{name: row._mapping[f"stale__{name}"] for name in _STALE_COLUMNS}))
        for row in rows
    ]


async def mark_nudged(conn: AsyncConnection, review_ids: Sequence[str], now: datetime) -> None:
    await conn.execute(
        update(stale_drafts).where(stale_drafts.c.review_id.in_(review_ids)).values(nudged_at=now)
    )


async def move_to_category(conn: AsyncConnection, review_ids: Sequence[str], category_id: str) -> None:
    """Drafts that moved category (a merge) take their stale rows, and so their slots, with them."""
    if review_ids:
        await conn.execute(
            update(stale_drafts)
            .where(stale_drafts.c.review_id.in_(review_ids))
            .values(category_id=category_id)
        )


async def windows_waiting(conn: AsyncConnection) -> list[tuple[str, str]]:
    """Every (project, category) with stale drafts still owed their nudge: what the sweep refills."""
    rows = await conn.execute(
        select(stale_drafts.c.project_id, stale_drafts.c.category_id)
        .where(stale_drafts.c.nudged_at.is_(None), stale_drafts.c.propagate.is_(True))
        .distinct()
    )
    return [(r.project_id, r.category_id) for r in rows]


async def pending_with_staleness(
    conn: AsyncConnection, project_id: str, category_id: str
) -> list[tuple[Review, StaleDraft | None]]:
    """The category's pending drafts, oldest first, each with its stale row (None: current)."""
    query = (
        select(reviews, *(stale_drafts.c[name].label(f"stale__{name}") for name in _STALE_COLUMNS))
        .outerjoin(stale_drafts, stale_drafts.c.review_id == reviews.c.id)
        .where(
            reviews.c.project_id == project_id,
            reviews.c.category_id == category_id,
            reviews.c.state.in_(_PENDING),
        )
        .order_by(reviews.c.id)
    )
    out: list[tuple[Review, StaleDraft | None]] = []
    for row in (await conn.execute(query)).all():
        stale = None
        if row._mapping["stale__review_id"] is not None:
            stale = StaleDraft(**{name: row._mapping[f"stale__{name}"] for name in _STALE_COLUMNS})
        out.append((_from_row(row), stale))
    return out


async def human_cursor(conn: AsyncConnection, project_id: str, category_id: str) -> tuple[str, int]:
    """The SDK's review cursor of a category: the draft a human last decided (approve, edit, reject), and
    how many human decisions moved it; ("", 0) before the first."""
    decided = (
        select(turns.c.review_id, turns.c.created_at, turns.c.seq)
        .join(reviews, reviews.c.id == turns.c.review_id)
        .where(
            reviews.c.project_id == project_id,
            reviews.c.category_id == category_id,
            turns.c.turn_type == "decision",
            turns.c.actor_kind == "human",
        )
        .subquery()
    )
    last = (
        await conn.execute(
            select(decided.c.review_id).order_by(decided.c.created_at.desc(), decided.c.seq.desc()).limit(1)
        )
    ).scalar_one_or_none()
    if last is None:
        return "", 0
    count = (await conn.execute(select(func.count()).select_from(decided))).scalar_one()
    return last, int(count)
