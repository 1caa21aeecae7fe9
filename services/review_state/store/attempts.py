"""Delivery attempts: one per review, the durable step between an approval and the provider.

A worker claims a row with a lease (a compare-and-set, so one worker on one replica holds it), journals
``stage = data`` before the provider's DATA, and closes it; a row whose worker died is claimed again
once its lease lapses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from reviewloop.storage import UnitOfWork
from sqlalchemy import and_, bindparam, case, delete, null, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.domain.review import Review
from review_state.domain.undo import undoable
from review_state.store.tables import delivery_attempts as t

QUEUED, DATA, PARKED = "queued", "data", "parked"


def start_attempt(
    uow: UnitOfWork,
    review: Review,
    send: Mapping[str, str],
    now: datetime,
    owner: str | None,
    until: datetime,
    restore: dict[str, Any] | None = None,
) -> Attempt:
    """Queue the attempt of ``send`` (the ids and path the release wrote on the review's row), already
    claimed by ``owner`` until ``until`` (its first try counted): the worker that releases it needs no
    claim of its own, and a dead one's lease lapses as any other.
    ``owner`` None: a release waiting out its undo window, claimed by nobody, due at ``until``, with
    what its decision found (``restore``) for an undo before then."""
    attempt = Attempt(
        review_id=review.id,
        project_id=review.project_id,
        message_id=send["message_id"],
        rfc_message_id=send["rfc_message_id"],
        send_path=send["send_path"],
        status="in_flight",
        stage=QUEUED,
        tries=0 if owner is None else 1,
        started_at=now,
        parked_at=None,
        finished_at=None,
        error=None,
        resolution=None,
        release_at=None if owner is not None else until,
    )
    values = {k: v for k, v in attempt.__dict__.items() if v is not None}
    uow.insert(t, {**values, "lease_owner": owner, "lease_until": until, "restore": restore})
    return attempt


@dataclass(frozen=True)
class Attempt:
    """A review's delivery, the ids it is sent under, and how far it got."""

    review_id: str
    project_id: str
    message_id: str
    rfc_message_id: str
    send_path: str
    status: str
    stage: str
    tries: int
    started_at: datetime
    parked_at: datetime | None
    finished_at: datetime | None
    error: str | None
    resolution: str | None
    release_at: datetime | None = None  # while its undo window is open (``undo_until``)

    def undo_until(self, now: datetime) -> datetime | None:
        """When this release goes to delivery, while its decider may still undo it; else None."""
        return self.release_at if undoable(self.release_at, self.tries > 0, now) else None


_COLUMNS = [t.c[name] for name in Attempt.__dataclass_fields__]


def _attempt(row: Any) -> Attempt:
    m = row._mapping
    return Attempt(*(m[name] for name in Attempt.__dataclass_fields__))


_ATTEMPT = select(t).where(t.c.review_id == bindparam("review_id"))
_ATTEMPT_IN_PROJECT = _ATTEMPT.where(t.c.project_id == bindparam("project_id"))


async def get_attempt(conn: AsyncConnection, review_id: str, project_id: str = "") -> Attempt | None:
    """The review's attempt; with ``project_id``, only if the review is that project's (another
    tenant's reads as absent)."""
    if project_id:
        row = (
            await conn.execute(_ATTEMPT_IN_PROJECT, {"review_id": review_id, "project_id": project_id})
        ).first()
    else:
        row = (await conn.execute(_ATTEMPT, {"review_id": review_id})).first()
    return _attempt(row) if row else None


def _claimable(now: Any) -> Any:
    return and_(
        t.c.status == "in_flight",
        t.c.stage.in_((QUEUED, DATA)),
        or_(t.c.lease_until.is_(None), t.c.lease_until <= now),
    )


async def due_attempts(conn: AsyncConnection, now: datetime, limit: int = 100) -> list[str]:
    """Review ids of attempts no live worker holds: never tried, due for a retry, or left by a dead one."""
    rows = await conn.execute(
        select(t.c.review_id).where(_claimable(now)).order_by(t.c.started_at).limit(limit)
    )
    return [row.review_id for row in rows]


# The worker's statements, built once (no statement built, no cache key walked per call).
_CLAIM = (
    update(t)
    .where(t.c.review_id == bindparam("attempt_id"), _claimable(bindparam("now")))
    .values(
        lease_owner=bindparam("owner"),
        lease_until=bindparam("until"),
        tries=t.c.tries + case((t.c.stage == QUEUED, 1), else_=0),
    )
    .returning(*_COLUMNS)
)


async def claim_attempt(
    conn: AsyncConnection, review_id: str, owner: str, now: datetime, lease: timedelta
) -> Attempt | None:
    """Take the attempt for ``lease`` unless a live worker holds it (the CAS makes one winner); a claim
    of a queued row counts a try. One statement: the claimed row comes back with it."""
    params = {"attempt_id": review_id, "now": now, "owner": owner, "until": now + lease}
    row = (await conn.execute(_CLAIM, params)).first()
    return _attempt(row) if row else None


def _held(review_id: Any, owner: Any) -> Any:
    return and_(t.c.review_id == review_id, t.c.status == "in_flight", t.c.lease_owner == owner)


_HELD = _held(bindparam("attempt_id"), bindparam("owner"))
_RENEW = update(t).where(_HELD).values(lease_until=bindparam("until"))
_REACH_DATA = update(t).where(_HELD, t.c.stage == QUEUED).values(stage=DATA)


async def renew_lease(conn: AsyncConnection, review_id: str, owner: str, until: datetime) -> bool:
    result = await conn.execute(_RENEW, {"attempt_id": review_id, "owner": owner, "until": until})
    return bool(result.rowcount == 1)


async def reach_data(conn: AsyncConnection, review_id: str, owner: str) -> bool:
    """Journal that this try is about to pass DATA; False when the worker lost its lease (do not send)."""
    result = await conn.execute(_REACH_DATA, {"attempt_id": review_id, "owner": owner})
    return bool(result.rowcount == 1)


async def requeue(
    conn: AsyncConnection, review_id: str, owner: str | None, retry_at: datetime, error: str | None
) -> bool:
    """Back to ``queued`` (no try passed DATA, or the provider knows it never took the message), to be
    tried again at ``retry_at``. ``owner`` None: a parked attempt the provider disowned."""
    held = _held(review_id, owner) if owner else and_(t.c.review_id == review_id, t.c.stage == PARKED)
    result = await conn.execute(
        update(t)
        .where(held, t.c.status == "in_flight")
        .values(stage=QUEUED, lease_owner=None, lease_until=retry_at, parked_at=None, error=error)
    )
    return bool(result.rowcount == 1)


async def park(conn: AsyncConnection, review_id: str, owner: str, now: datetime) -> bool:
    """``send_needs_reconciliation``: a try passed DATA and its outcome is unknown."""
    result = await conn.execute(
        update(t)
        .where(_held(review_id, owner), t.c.stage == DATA)
        .values(stage=PARKED, parked_at=now, lease_owner=None, lease_until=None)
    )
    return bool(result.rowcount == 1)


# Built once; ``reviews.compare_and_set(finishing=...)`` runs it with the review's move.
FINISH = (
    update(t)
    .where(t.c.review_id == bindparam("attempt_id"), t.c.status == "in_flight")
    .values(
        status=bindparam("closed_as"),
        finished_at=bindparam("now"),
        error=bindparam("why"),
        resolution=bindparam("how"),
        lease_owner=null(),  # a literal: a None here is a parameter a WITH around it leaves unbound
        lease_until=null(),
    )
    .returning(*_COLUMNS)
)


def finish_params(
    review_id: str, status: str, now: datetime, error: str | None, resolution: str | None
) -> dict[str, Any]:
    return {"attempt_id": review_id, "now": now, "closed_as": status, "why": error, "how": resolution}


async def finish_attempt(
    conn: AsyncConnection,
    review_id: str,
    status: str,
    now: datetime,
    error: str | None = None,
    resolution: str | None = None,
) -> Attempt | None:
    """Closes an in-flight attempt and returns it closed; None when someone (the sweep, a twin) already
    closed it."""
    row = (await conn.execute(FINISH, finish_params(review_id, status, now, error, resolution))).first()
    return _attempt(row) if row else None


async def parked_attempts(conn: AsyncConnection, limit: int = 100) -> list[Attempt]:
    """Attempts waiting for evidence, oldest first."""
    rows = await conn.execute(
        select(t).where(t.c.status == "in_flight", t.c.stage == PARKED).order_by(t.c.parked_at).limit(limit)
    )
    return [_attempt(row) for row in rows]


# A release waiting out its undo window that no worker has claimed yet.
WAITING = and_(
    t.c.status == "in_flight",
    t.c.stage == QUEUED,
    t.c.tries == 0,
    t.c.lease_owner.is_(None),
    t.c.release_at.is_not(None),
)
# An undo takes back a release only while its window is open and no worker claimed it (``undoable``):
# one statement, so the undo and the claim race on the row and exactly one of them wins.
_WITHDRAW = (
    delete(t)
    .where(t.c.review_id == bindparam("attempt_id"), WAITING, t.c.release_at > bindparam("now"))
    .returning(t.c.restore)
)


async def withdraw(conn: AsyncConnection, review_id: str, now: datetime) -> dict[str, Any] | None:
    """Delete a release still in its undo window and return what its decision found; None when it was
    released already (its window closed, or a worker claimed it) or never waited (no window)."""
    row = (await conn.execute(_WITHDRAW, {"attempt_id": review_id, "now": now})).first()
    return dict(row.restore) if row is not None and row.restore is not None else None
