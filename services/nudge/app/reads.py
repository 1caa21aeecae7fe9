"""Reads and waits: the caller's un-acked nudges and broadcasts as a page, a long-poll, or a stream,
and the ack cursors answered beside them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from reviewloop.errors import Code, DomainError
from reviewloop.eventcursor import Position
from reviewloop.storage import Database
from reviewloop.tenancy import Principal

from nudge import store
from nudge.store import Nudge
from nudge.wakeup import doorbell

LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200
WAIT_MIN_S, WAIT_MAX_S = 1.0, 60.0


def _recheck_s() -> float:
    """The waiter's safety-net recheck, ``nudge.app.RECHECK_S`` (``wakeup.RECHECK_S`` unless turned),
    read at each wait from the package: the one knob a test or an operator turns."""
    import nudge.app

    return nudge.app.RECHECK_S


def is_broadcast(nudge: Nudge) -> bool:
    return not nudge.review_id


def _past(position: Position, nudge: Nudge) -> Position:
    return position.past(nudge.pos, broadcast=is_broadcast(nudge))


def _parse_cursor(cursor: str) -> Position:
    try:
        return Position.parse(cursor)
    except ValueError:
        raise DomainError(
            Code.BAD_REQUEST, "cursor is not one this service issued; pass next_cursor as given."
        ) from None


def _limit(limit: int) -> int:
    if limit < 0 or limit > LIST_LIMIT_MAX:
        raise DomainError(Code.BAD_REQUEST, f"limit must be between 1 and {LIST_LIMIT_MAX}.")
    return limit or LIST_LIMIT_DEFAULT


async def _unacked(
    db: Database, principal: Principal, after: Position, limit: int, review_id: str = ""
) -> list[tuple[Nudge, Position]]:
    """Up to ``limit`` of the caller's un-acked nudges and broadcasts after ``after``, oldest first, each
    with the position right after it. The two queues are merged by creation time; each is read as a
    prefix in its own order, so a position never skips a row of either."""
    async with db.single_statement.connect() as conn:
        nudges, broadcasts = await store.unacked_front(
            conn,
            principal,
            after=after.nudge,
            after_broadcast=after.broadcast,
            limit=limit,
            review_id=review_id,
        )
    if not broadcasts:  # the usual page: nothing to merge
        return [(nudge, Position(nudge.pos, after.broadcast)) for nudge in nudges[:limit]]
    merged: list[tuple[Nudge, Position]] = []
    position, n, b = after, 0, 0
    while len(merged) < limit and (n < len(nudges) or b < len(broadcasts)):
        if b < len(broadcasts) and (n == len(nudges) or broadcasts[b].created_at <= nudges[n].created_at):
            item, b = broadcasts[b], b + 1
        else:
            item, n = nudges[n], n + 1
        position = _past(position, item)
        merged.append((item, position))
    return merged


def front_cursors(front: Sequence[Nudge]) -> dict[str, int]:
    """The cursors ``front`` tells, for nudges just read from the front of the caller's un-acked
    frontier (a wait, a list without a cursor): a review's un-acked seqs are the ones right after its
    cursor and a read from the front meets its lowest first, so its cursor is that seq - 1."""
    lowest: dict[str, int] = {}
    for nudge in front:
        if nudge.review_id:
            lowest[nudge.review_id] = min(lowest.get(nudge.review_id, nudge.seq), nudge.seq)
    return {review_id: seq - 1 for review_id, seq in lowest.items()}


async def cursors(
    db: Database,
    principal: Principal,
    review_ids: Iterable[str],
    *,
    known: Mapping[str, int] = MappingProxyType({}),
) -> dict[str, tuple[int, int]]:
    """``review_id -> (last_acked_seq, last_seq)`` of those reviews the caller may see (the SDK's
    ReviewEventCursor, and the review's newest seq); ``known``: cursors the caller already learnt from its
    own statement (``front_cursors``, an ack's), so only the others are read: their ``last_seq`` is 0
    (not read)."""
    found = {review_id: (seq, 0) for review_id, seq in known.items()}
    wanted = sorted({review_id for review_id in review_ids if review_id} - found.keys())
    if wanted:
        async with db.single_statement.connect() as conn:
            found |= await store.cursors_of(conn, principal, wanted)
    return found


async def list_events(
    db: Database, principal: Principal, *, limit: int, cursor: str, review_id: str = ""
) -> tuple[list[Nudge], str]:
    """The caller's un-acked nudges across its reviews and its un-acked broadcasts (``seq`` 0), oldest
    first, a page at a time; with ``review_id``, that review's nudges only.

    Errors: ``bad_request`` for a limit out of 1..200 or a cursor this service did not issue.
    """
    limit = _limit(limit)
    rows = await _unacked(db, principal, _parse_cursor(cursor), limit + 1, review_id)
    page = rows[:limit]
    next_cursor = str(page[-1][1]) if len(rows) > limit else ""
    return [nudge for nudge, _ in page], next_cursor


async def wait_for_events(
    db: Database, principal: Principal, *, timeout_s: float, limit: int, review_id: str = ""
) -> list[Nudge]:
    """Long-poll: the caller's un-acked nudges and broadcasts (``review_id``'s nudges only, when given)
    as soon as any is visible, or ``[]`` after ``timeout_s``.

    Errors: ``bad_request`` for a timeout outside 1..60 s or a limit outside 1..200.
    """
    if not WAIT_MIN_S <= timeout_s <= WAIT_MAX_S:
        raise DomainError(
            Code.BAD_REQUEST, f"timeout_s must be between {WAIT_MIN_S:.0f} and {WAIT_MAX_S:.0f} seconds."
        )
    limit = _limit(limit)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    with doorbell(db).waiter(principal.project_id) as rung:
        while True:
            rung.clear()
            rows = await _unacked(db, principal, Position(), limit, review_id)
            remaining = deadline - loop.time()
            if rows or remaining <= 0:
                return [nudge for nudge, _ in rows]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rung.wait(), min(remaining, _recheck_s()))


async def subscribe(
    db: Database, principal: Principal, *, cursor: str, from_head: bool = False
) -> AsyncIterator[tuple[Nudge | None, str]]:
    """Stream the caller's un-acked nudges and broadcasts after ``cursor``, then each new one as it
    commits, forever. ``from_head`` starts after the newest the project now holds instead, and first
    yields ``(None, cursor of that point)``: a live tail (the gateway's one read per project).

    Yields (nudge, cursor to resume after it). Acking stays the consumer's job (``ack``).
    Errors: ``bad_request`` for a cursor this service did not issue.
    """
    after = _parse_cursor(cursor)
    with doorbell(db).waiter(principal.project_id) as rung:
        if from_head:
            async with db.one_statement() as conn:
                after = Position(*await store.head_of(conn, principal))
            yield None, str(after)
        while True:
            rung.clear()
            rows = await _unacked(db, principal, after, LIST_LIMIT_MAX)
            for nudge, after in rows:
                yield nudge, str(after)
            if len(rows) < LIST_LIMIT_MAX:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(rung.wait(), _recheck_s())


@dataclass(frozen=True)
class Page:
    """What ``ListEvents`` and ``WaitForEvents`` answer: the nudges, the cursor to resume after them
    (``""``: none, and always on a wait), and ``review_id -> (last_acked_seq, last_seq)`` of each review
    they name and of the one asked about (``cursors``)."""

    events: list[Nudge]
    cursors: dict[str, tuple[int, int]]
    next_cursor: str = ""


async def list_with_cursors(
    db: Database, principal: Principal, *, limit: int, cursor: str, review_id: str = ""
) -> Page:
    """``ListEvents``: a page of ``list_events`` and the cursors of the reviews it names, read, never
    taken from the events: a list answers each review's newest seq too (``Cursor.last_seq``, which a
    recheck is checked against).

    Errors: as ``list_events``.
    """
    events, next_cursor = await list_events(db, principal, limit=limit, cursor=cursor, review_id=review_id)
    found = await cursors(db, principal, [review_id, *(e.review_id for e in events)])
    return Page(events, found, next_cursor)


async def wait_with_cursors(
    db: Database, principal: Principal, *, timeout_s: float, limit: int, review_id: str = ""
) -> Page:
    """``WaitForEvents``: ``wait_for_events`` and the cursors of the reviews it names; a wait reads from
    the front of the frontier, so those of its nudges are known without a read (``front_cursors``).

    Errors: as ``wait_for_events``.
    """
    events = await wait_for_events(db, principal, timeout_s=timeout_s, limit=limit, review_id=review_id)
    found = await cursors(
        db, principal, [review_id, *(e.review_id for e in events)], known=front_cursors(events)
    )
    return Page(events, found)
