"""Reviews and the turns of their threads, read and written in the domain's words."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from typing import Any, NoReturn

from reviewloop.storage import UnitOfWork, utcnow
from sqlalchemy import CTE, Select, and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.domain.machine import PENDING, State
from review_state.domain.review import AttachmentFacts, Review, RevisionContent, Turn
from review_state.domain.submission import HUMANS_NOTIFIED, Attachment, Intent
from review_state.store.attempts import FINISH, Attempt
from review_state.store.tables import (
    delivery_attempts,
    idempotency_keys,
    review_revisions,
    reviews,
    stale_drafts,
    turns,
)

_COLUMN = {"to": "to_addrs", "cc": "cc_addrs", "bcc": "bcc_addrs"}


def _attachments_to_json(items: Sequence[Attachment]) -> list[dict[str, str]]:
    return [
        {
            "filename": a.filename,
            "content_type": a.content_type,
            "content_base64": base64.b64encode(a.content).decode(),
        }
        for a in items
    ]


def _attachments_from_json(items: list[dict[str, str]]) -> tuple[Attachment, ...]:
    return tuple(
        Attachment(a["filename"], a["content_type"], base64.b64decode(a["content_base64"])) for a in items
    )


def _from_row(row: Any) -> Review:
    m = dict(row._mapping)
    values: dict[str, Any] = {}
    for name in Review.__dataclass_fields__:
        column = _COLUMN.get(name, name)
        values[name] = m[column]
    values["state"] = State(m["state"])
    values["attachments"] = _attachments_from_json(m["attachments"] or [])
    values["headers"] = dict(m["headers"] or {})
    values["intent"] = Intent.from_json(m["intent"])
    return Review(**values)


_FIELDS = tuple(Review.__dataclass_fields__)  # every field of a review is a column of its row


def _to_row(review: Review, names: Iterable[str] = Review.__dataclass_fields__) -> dict[str, Any]:
    """``review``'s columns (only those of the fields ``names``) as the table stores them."""
    row: dict[str, Any] = {}
    for name in names:
        value = getattr(review, name)
        if name == "state":
            value = value.value
        elif name == "attachments":
            value = _attachments_to_json(value)
        elif name == "intent":
            value = value.as_json() if value is not None else None
        elif name in _COLUMN:
            value = list(value)
        row[_COLUMN.get(name, name)] = value
    return row


def add_review(uow: UnitOfWork, review: Review) -> None:
    """Queue the new review and its first revision, written with the unit's last rows."""
    uow.insert(reviews, _to_row(review))
    uow.insert(review_revisions, _revision_row(review))


_REVIEW = select(reviews).where(
    reviews.c.id == bindparam("review_id"), reviews.c.project_id == bindparam("project_id")
)
_REVIEW_FOR_UPDATE = _REVIEW.with_for_update()


async def get_review(
    conn: AsyncConnection, project_id: str, review_id: str, *, for_update: bool = False
) -> Review | None:
    """The review, if it belongs to ``project_id``; another tenant's review reads as absent."""
    query = _REVIEW_FOR_UPDATE if for_update else _REVIEW
    row = (await conn.execute(query, {"review_id": review_id, "project_id": project_id})).first()
    return _from_row(row) if row else None


# The review and what the caller's Idempotency-Key remembers (nothing: NULLs), in one statement.
_REVIEW_KEYED = (
    select(
        reviews,
        idempotency_keys.c.request_hash.label("key__request_hash"),
        idempotency_keys.c.result_id.label("key__result_id"),
        select(stale_drafts.c.review_id)
        .where(stale_drafts.c.review_id == reviews.c.id)
        .exists()
        .label("stale"),
    )
    .outerjoin(
        idempotency_keys,
        and_(
            idempotency_keys.c.project_id == reviews.c.project_id,
            idempotency_keys.c.actor_id == bindparam("actor_id"),
            idempotency_keys.c.key == bindparam("key"),
        ),
    )
    .where(reviews.c.id == bindparam("review_id"), reviews.c.project_id == bindparam("project_id"))
)


async def get_review_keyed(
    conn: AsyncConnection, project_id: str, review_id: str, actor_id: str, key: str
) -> tuple[Review, str | None, str, bool] | None:
    """The review (as ``get_review``), the request hash ``actor_id``'s Idempotency-Key ``key`` was
    remembered with (None: never used), its result id, and whether the draft is held stale (a
    ``stale_drafts`` row), in one round trip."""
    row = (
        await conn.execute(
            _REVIEW_KEYED,
            {"review_id": review_id, "project_id": project_id, "actor_id": actor_id, "key": key},
        )
    ).first()
    if row is None:
        return None
    return _from_row(row), row.key__request_hash, row.key__result_id or "", bool(row.stale)


_REVIEW_ANY = select(reviews).where(reviews.c.id == bindparam("review_id"))


async def get_review_any(conn: AsyncConnection, review_id: str) -> Review | None:
    """System use only (the reconciliation sweep): no tenant filter."""
    row = (await conn.execute(_REVIEW_ANY, {"review_id": review_id})).first()
    return _from_row(row) if row else None


@dataclass(frozen=True)
class ReviewFilter:
    """Which of a project's reviews a listing holds (``ListReviews``'s filters); empty matches every one."""

    states: tuple[str, ...] = ()
    agent_id: str = ""
    category_id: str = ""
    humans_notified: bool = False  # a human was notified of it (an auto-send's turn)
    inbox: str = ""
    thread_id: str = ""
    parked: bool = False
    escalated: bool = False
    escalated_to: tuple[str, ...] = ()  # escalated to one of these (key ids, role:<role>)
    overdue: bool = False  # escalated, and its deadline passed (``now``)
    now: datetime | None = None


async def list_reviews(
    conn: AsyncConnection, project_id: str, filters: ReviewFilter, *, before_id: str, limit: int
) -> list[Review]:
    """Newest first; ``before_id`` is the keyset cursor (ids sort by creation time)."""
    query = _matching(select(reviews), project_id, filters)
    if before_id:
        query = query.where(reviews.c.id < before_id)
    rows = await conn.execute(query.order_by(reviews.c.id.desc()).limit(limit))
    return [_from_row(row) for row in rows]


async def count_reviews(conn: AsyncConnection, project_id: str, filters: ReviewFilter) -> int:
    """How many reviews ``list_reviews`` pages through with these filters (every page)."""
    query = _matching(select(func.count()).select_from(reviews), project_id, filters)
    return int(await conn.scalar(query) or 0)


def _matching(query: Select[Any], project_id: str, filters: ReviewFilter) -> Select[Any]:
    query = query.where(reviews.c.project_id == project_id)
    if filters.parked:  # its delivery parked for reconciliation (the attempts store's PARKED stage)
        waiting = select(delivery_attempts.c.review_id).where(
            delivery_attempts.c.review_id == reviews.c.id,
            delivery_attempts.c.status == "in_flight",
            delivery_attempts.c.stage == "parked",
        )
        query = query.where(waiting.exists())
    if filters.escalated:  # a reviewer escalated it, and no human settled it since
        query = query.where(reviews.c.escalated_at.is_not(None))
    if filters.escalated_to:
        query = query.where(reviews.c.escalated_to.in_(filters.escalated_to))
    if filters.overdue:
        query = query.where(reviews.c.escalation_deadline <= (filters.now or utcnow()))
    if filters.humans_notified:
        notified = select(turns.c.id).where(
            turns.c.review_id == reviews.c.id, turns.c.turn_type == HUMANS_NOTIFIED
        )
        query = query.where(notified.exists())
    if filters.states:
        query = query.where(reviews.c.state.in_(filters.states))
    if filters.agent_id:
        query = query.where(reviews.c.agent_id == filters.agent_id)
    if filters.category_id:
        query = query.where(reviews.c.category_id == filters.category_id)
    if filters.inbox:
        query = query.where(func.lower(reviews.c.from_address) == filters.inbox.lower())
    if filters.thread_id:
        query = query.where(reviews.c.thread_ref == filters.thread_id)
    return query


# A reply not yet sent, cancelled or failed: a pending draft, or one being delivered.
_REPLY_PENDING = [s.value for s in PENDING] + [State.APPROVED.value]


async def pending_reply(conn: AsyncConnection, project_id: str, thread_ref: str) -> str | None:
    """The id of a reply to ``thread_ref`` still pending (the oldest), else None, read in the transaction
    that writes the next reply: writers of one thread are serialized (PostgreSQL: a transaction-scoped
    advisory lock; SQLite has one writer), so two replies racing cannot both find none."""
    if conn.dialect.name == "postgresql":
        key = f"reply:{project_id}:{thread_ref}"
        await conn.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(key, 0))))
    return await conn.scalar(
        select(reviews.c.id)
        .where(
            reviews.c.project_id == project_id,
            reviews.c.thread_ref == thread_ref,
            reviews.c.kind == "reply",
            reviews.c.state.in_(_REPLY_PENDING),
        )
        .order_by(reviews.c.id)
        .limit(1)
    )


# The send paths the per-category daily auto-send cap counts: releases no human reviewed.
AUTO_RELEASES = ("graduated_auto", "reviewer_approved")


async def auto_send_room(
    conn: AsyncConnection, project_id: str, category_id: str, since: datetime, cap: int
) -> bool:
    """Whether ``category_id`` has room under its daily auto-send cap for one more release.

    The cap counts the releases themselves (rows with an automatic send path, released since
    ``since``), read in the transaction that writes the next one: a release that does not commit (a
    lost race, a failed insert, an Idempotency-Key twin) spends nothing. Writers of one category are
    serialized (PostgreSQL: a transaction-scoped advisory lock; SQLite has one writer)."""
    if conn.dialect.name == "postgresql":
        key = f"auto_send:{project_id}:{category_id}"
        await conn.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(key, 0))))
    released = func.coalesce(reviews.c.decided_at, reviews.c.created_at)
    used = await conn.scalar(
        select(func.count())
        .select_from(reviews)
        .where(
            reviews.c.project_id == project_id,
            reviews.c.category_id == category_id,
            reviews.c.send_path.in_(AUTO_RELEASES),
            released >= since,
        )
    )
    return int(used or 0) < cap


def in_scope(*, org_id: str, project_id: str, category_id: str, agent_id: str) -> list[Any]:
    """The drafts of a rule's (or a graduation's) scope: its org, and its project, category and agent
    where it names one ("": any)."""
    named = (
        (reviews.c.project_id, project_id),
        (reviews.c.category_id, category_id),
        (reviews.c.agent_id, agent_id),
    )
    return [reviews.c.org_id == org_id, *(column == value for column, value in named if value)]


async def pending_in_scope(
    conn: AsyncConnection, *, org_id: str, project_id: str, category_id: str, agent_id: str, lock: bool = True
) -> list[Review]:
    """The drafts a rule change or a graduation may still affect; ``lock`` holds them against concurrent
    closes so no nudge lands after a review's terminal one."""
    query = select(reviews).where(
        *in_scope(org_id=org_id, project_id=project_id, category_id=category_id, agent_id=agent_id),
        reviews.c.state.in_([s.value for s in PENDING]),
    )
    query = query.order_by(reviews.c.id)
    rows = await conn.execute(query.with_for_update() if lock else query)
    return [_from_row(row) for row in rows]


async def past_review_deadline(
    conn: AsyncConnection, now: datetime, forced_outcome: str, limit: int
) -> list[Review]:
    """Drafts whose current revision still waits for a decision past its review deadline (a decision or
    a hold clears the deadline, a redraft sets a new one), and that the deadline has not already forced
    to a human (``forced_outcome``), oldest deadline first."""
    rows = await conn.execute(
        select(reviews)
        .where(
            reviews.c.state == State.NEEDS_REVIEW.value,
            reviews.c.review_deadline <= now,
            or_(reviews.c.gate_outcome.is_(None), reviews.c.gate_outcome != forced_outcome),
        )
        .order_by(reviews.c.review_deadline)
        .limit(limit)
    )
    return [_from_row(row) for row in rows]


# Built once: the parameters' keys name the SET clause (SQLAlchemy compiles and caches one statement per
# set of columns), so a CAS neither builds a statement nor walks its cache key.
# The row at the version its writer read: every compare-and-set's guard (``_CAS``, ``_cas``).
_AT_VERSION = (reviews.c.id == bindparam("cas_id"), reviews.c.version == bindparam("cas_version"))
_CAS = update(reviews).where(*_AT_VERSION)
# A draft its caller read as not stale: the CAS takes it only if it still is not (no stale_drafts row).
_NOT_STALE = ~select(stale_drafts.c.review_id).where(stale_drafts.c.review_id == bindparam("cas_id")).exists()
_CAS_NOT_STALE = _CAS.where(_NOT_STALE)


@dataclass(frozen=True)
class Cas:
    """How a compare-and-set is written, beyond the row's version: what else it is conditional on, and
    whether it may be its unit's last statement (the PostgreSQL fast path)."""

    # The unit reads nothing the write changes, so on PostgreSQL it is the unit's last statement
    # (``UnitOfWork.last``: the unit's queued rows go with it, and only if it takes the row; unless that
    # fast path is off); a lost race raises ``lost`` when the unit ends, and the turn has no seq yet.
    last: bool = False
    # Close the review's in-flight delivery attempt too (``finish_params``): the write is lost if it
    # was closed already.
    finishing: dict[str, Any] | None = None
    not_stale: bool = False  # the write is lost if the draft is held stale (a ``stale_drafts`` row)


PLAIN = Cas()


async def compare_and_set(
    uow: UnitOfWork,
    current: Review,
    changed: Review,
    *,
    turn: Turn | None = None,
    cas: Cas = PLAIN,
    lost: Callable[[], Awaitable[NoReturn]] | None = None,
) -> tuple[Review, Turn | None] | None:
    """Write ``changed`` (``current`` with its changes, ``dataclasses.replace`` of it: a misspelt field
    is a type error) only if the row is still at ``current.version``; the row count decides. With
    ``turn``, append it to the review's thread (at the next seq, the review's new revision) only if the
    row was written: on PostgreSQL in the same statement. ``cas``: what else the write is conditional
    on, and whether it is the unit's last statement (then ``lost`` raises a lost race); otherwise (and
    on SQLite) it is written now.

    Returns the new review and the turn, or None when another writer got there first.
    """
    finishing, not_stale = cas.finishing, cas.not_stale
    updated = replace(changed, version=current.version + 1)
    # Only what changed: the version CAS already guarantees nobody else wrote the row since.
    names = [n for n in _FIELDS if getattr(updated, n) != getattr(current, n)]
    values = _to_row(updated, names)
    guard = {"cas_id": current.id, "cas_version": current.version}
    if turn is not None:
        turn = replace(turn, review_id=current.id, revision=updated.revision)
    turn_values = {f"turn_{name}": getattr(turn, name) for name in _TURN_FIELDS} if turn is not None else {}
    sets = {f"set_{name}": value for name, value in values.items()}  # ``_cas``'s names for ``values``
    if cas.last and lost is not None and uow.takes_last:
        statement, cte = _cas(tuple(values), turn is not None, finishing is not None, not_stale)
        uow.last(statement, cte, {**sets, **guard, **turn_values, **(finishing or {})}, lost)
    elif finishing is not None and (await uow.conn.execute(FINISH, finishing)).first() is None:
        return None
    elif turn is not None and uow.conn.dialect.name == "postgresql":
        statement, _ = _cas(tuple(values), True, False, not_stale)
        seq = (await uow.conn.execute(statement, {**sets, **guard, **turn_values})).scalar()
        if seq is None:
            return None
        turn = replace(turn, seq=seq)
    else:
        if (await uow.conn.execute(_CAS_NOT_STALE if not_stale else _CAS, {**values, **guard})).rowcount != 1:
            return None
        if turn is not None:
            turn = await add_turn(uow.conn, turn)
    if updated.revision > current.revision:  # with the unit's last rows (after a last CAS, only if it took)
        uow.insert(review_revisions, _revision_row(updated))
    elif updated.revision < current.revision:  # an undone edit: the revision it wrote is no more
        await uow.conn.execute(
            delete(review_revisions).where(
                review_revisions.c.review_id == current.id, review_revisions.c.revision > updated.revision
            )
        )
    return updated, turn


@lru_cache(maxsize=64)
def _cas(
    columns: tuple[str, ...], with_turn: bool, finishing: bool, not_stale: bool
) -> tuple[Select[Any], CTE]:
    """The compare-and-set of ``columns`` as a data-modifying WITH (PostgreSQL), with its turn when
    ``with_turn``, and its ``cas`` CTE. The turn row comes from the CAS's own row, so a lost CAS inserts
    nothing and the statement answers no row; its next seq is read under the row lock the CAS holds, as
    ``add_turn``'s is. ``finishing``: the CAS takes its row only if ``FINISH`` closed the attempt;
    ``not_stale``: only if no ``stale_drafts`` row names it."""
    guard = [*_AT_VERSION]
    if finishing:
        guard.append(select(FINISH.cte("finished").c.review_id).exists())
    if not_stale:
        guard.append(_NOT_STALE)
    cas = (
        update(reviews)
        .where(*guard)
        # Parameters that name no column: in a WITH, SQLAlchemy would add one that does to every UPDATE's SET.
        .values({name: bindparam(f"set_{name}", type_=reviews.c[name].type) for name in columns})
        .returning(reviews.c.id)
        .cte("cas")
    )
    if not with_turn:
        return select(cas.c.id), cas
    next_seq = (
        select(func.coalesce(func.max(turns.c.seq), 0) + 1)
        .where(turns.c.review_id == cas.c.id)
        .scalar_subquery()
    )
    row = [bindparam(f"turn_{name}", type_=turns.c[name].type) for name in _TURN_FIELDS]
    added = (
        insert(turns)
        .from_select([*_TURN_FIELDS, "seq"], select(*row, next_seq).select_from(cas))
        .returning(turns.c.seq)
        .cte("turn")
    )
    return select(added.c.seq), cas


# --- revisions ----------------------------------------------------------------------------------


def _revision_row(review: Review) -> dict[str, Any]:
    """``review``'s content as its revision's snapshot, queued in the caller's unit of work: every
    revision is born in ``add_review`` or a ``compare_and_set`` that bumps it, so none is missed."""
    content = RevisionContent.of(review)
    return {
        "review_id": content.review_id,
        "revision": content.revision,
        "project_id": review.project_id,
        "subject": content.subject,
        "to_addrs": content.to,
        "cc_addrs": content.cc,
        "bcc_addrs": content.bcc,
        "body_text": content.body_text,
        "body_html": content.body_html,
        "attachments": [a.__dict__ for a in content.attachments],
        "created_at": content.created_at,
    }


async def list_revisions(conn: AsyncConnection, project_id: str, review_id: str) -> list[RevisionContent]:
    """The review's kept revisions, oldest first; another tenant's review has none."""
    rows = await conn.execute(
        select(review_revisions)
        .where(review_revisions.c.review_id == review_id, review_revisions.c.project_id == project_id)
        .order_by(review_revisions.c.revision)
    )
    return [
        RevisionContent(
            review_id=r.review_id,
            revision=r.revision,
            subject=r.subject,
            to=list(r.to_addrs),
            cc=list(r.cc_addrs),
            bcc=list(r.bcc_addrs),
            body_text=r.body_text,
            body_html=r.body_html,
            attachments=tuple(AttachmentFacts(**a) for a in r.attachments or []),
            created_at=r.created_at,
        )
        for r in rows
    ]


# --- turns --------------------------------------------------------------------------------------


_TURN_FIELDS = [column.name for column in turns.c if column.name != "seq"]
_TURN_REVIEW = bindparam("review_id", type_=turns.c.review_id.type)
# Built once: the next seq and the insert in one statement.
_ADD_TURN = (
    insert(turns)
    .from_select(
        [*_TURN_FIELDS, "seq"],
        select(
            *(
                _TURN_REVIEW if name == "review_id" else bindparam(name, type_=turns.c[name].type)
                for name in _TURN_FIELDS
            ),
            func.coalesce(func.max(turns.c.seq), 0) + 1,
        ).where(turns.c.review_id == _TURN_REVIEW),
    )
    .returning(turns.c.seq)
)


async def add_turn(conn: AsyncConnection, turn: Turn) -> Turn:
    """Appends ``turn`` at the review's next seq (the caller holds the review row via its CAS)."""
    seq = (await conn.execute(_ADD_TURN, {name: getattr(turn, name) for name in _TURN_FIELDS})).scalar_one()
    return replace(turn, seq=seq)


async def list_turns(conn: AsyncConnection, review_id: str) -> list[Turn]:
    rows = await conn.execute(select(turns).where(turns.c.review_id == review_id).order_by(turns.c.seq))
    return [Turn(**dict(r._mapping)) for r in rows]


_TURN_LABELS = {column.name: f"turn__{column.name}" for column in turns.c}
_ATTEMPT_LABELS = {name: f"attempt__{name}" for name in Attempt.__dataclass_fields__}
# Built once: the hot read path then skips statement construction and its cache-key walk per call.
_REVIEW_WITH_TURNS = (
    select(reviews, *(turns.c[name].label(label) for name, label in _TURN_LABELS.items()))
    .outerjoin(turns, turns.c.review_id == reviews.c.id)
    .where(reviews.c.id == bindparam("review_id"), reviews.c.project_id == bindparam("project_id"))
    .order_by(turns.c.seq)
)
# The same with the review's delivery attempt (at most one row per review: no rows multiplied).
_REVIEW_WITH_TURNS_AND_ATTEMPT = _REVIEW_WITH_TURNS.add_columns(
    *(delivery_attempts.c[name].label(label) for name, label in _ATTEMPT_LABELS.items())
).outerjoin(delivery_attempts, delivery_attempts.c.review_id == reviews.c.id)


def _turns_of(rows: Sequence[Any]) -> list[Turn]:
    return [
        Turn(**{name: row._mapping[label] for name, label in _TURN_LABELS.items()})
        for row in rows
        if row._mapping[_TURN_LABELS["id"]] is not None
    ]


async def get_review_with_turns(
    conn: AsyncConnection, project_id: str, review_id: str
) -> tuple[Review, list[Turn]] | None:
    """The review and its turns in one statement: one round trip and one snapshot for the hot read
    path. Another tenant's review reads as absent."""
    found = await conn.execute(_REVIEW_WITH_TURNS, {"review_id": review_id, "project_id": project_id})
    rows = found.all()
    return (_from_row(rows[0]), _turns_of(rows)) if rows else None


async def get_review_with_delivery(
    conn: AsyncConnection, project_id: str, review_id: str
) -> tuple[Review, list[Turn], Attempt | None] | None:
    """The review, its turns and its delivery attempt (None before its release) in one statement, as
    a review is read; another tenant's review reads as absent."""
    found = await conn.execute(
        _REVIEW_WITH_TURNS_AND_ATTEMPT, {"review_id": review_id, "project_id": project_id}
    )
    rows = found.all()
    if not rows:
        return None
    head = rows[0]._mapping
    attempt = (
        Attempt(**{name: head[label] for name, label in _ATTEMPT_LABELS.items()})
        if head[_ATTEMPT_LABELS["review_id"]] is not None
        else None
    )
    return _from_row(rows[0]), _turns_of(rows), attempt


async def get_turn(conn: AsyncConnection, turn_id: str) -> Turn | None:
    row = (await conn.execute(select(turns).where(turns.c.id == turn_id))).first()
    return Turn(**dict(row._mapping)) if row else None
