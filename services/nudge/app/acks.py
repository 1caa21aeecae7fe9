"""Acks: a review's ack cursor advanced (monotonic, idempotent), broadcasts marked done for the
caller; and the retention sweep that compacts what was acked."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from reviewloop.errors import Code, DomainError
from reviewloop.storage import Database, utcnow
from reviewloop.storage.outbox import prune
from reviewloop.tenancy import Principal

from nudge import store
from nudge.app.env import Env
from nudge.app.reads import cursors

log = logging.getLogger(__name__)


MAX_ACKS = 100


@dataclass(frozen=True)
class Acked:
    """What an ack took (acks and broadcast ids), and the new cursor of each review it moved."""

    taken: int
    cursors: dict[str, int]


async def ack(
    db: Database, principal: Principal, acks: list[tuple[str, int]], broadcast_ids: Sequence[str] = ()
) -> int:
    """``acknowledge``, answering how many acks and broadcast ids were taken."""
    return (await acknowledge(db, principal, acks, broadcast_ids)).taken


async def acknowledge(
    db: Database, principal: Principal, acks: list[tuple[str, int]], broadcast_ids: Sequence[str] = ()
) -> Acked:
    """Advance each review's ack cursor to the seq given: monotonic and idempotent (an older or
    repeated ack changes nothing); and mark each broadcast of ``broadcast_ids`` done for the caller, so
    it never sees it again. All or nothing. Returns how many acks and broadcast ids were taken.

    Errors: ``bad_request`` (nothing to ack, more than 100 acks or broadcast ids, a seq below 1 or past
    the review's head), ``not_found`` for a review or broadcast the caller cannot see.
    """
    if not acks and not broadcast_ids:
        raise DomainError(Code.BAD_REQUEST, "acks: give at least one {review_id, seq}, or a broadcast id.")
    if len(acks) > MAX_ACKS or len(broadcast_ids) > MAX_ACKS:
        raise DomainError(
            Code.BAD_REQUEST, f"acks: at most {MAX_ACKS} acks and {MAX_ACKS} broadcast ids per call."
        )
    wanted: dict[str, int] = {}
    for review_id, seq in acks:
        if seq < 1:
            raise DomainError(Code.BAD_REQUEST, f"acks: seq {seq} of {review_id} must be at least 1.")
        wanted[review_id] = max(seq, wanted.get(review_id, 0))
    ids = list(dict.fromkeys(broadcast_ids))
    async with db.one_statement() if not ids else _transaction(db) as conn:
        if ids:
            missing = set(ids) - await store.ack_broadcasts(conn, principal, ids)
            if missing:
                raise DomainError(
                    Code.NOT_FOUND, f"No broadcast {sorted(missing)[0]} is visible to this key."
                )
        # The happy path is one guarded DELETE; only when it changes nothing (a repeated ack, or a
        # refused one) do we read the heads, to tell the two apart and name what was wrong.
        moved = await store.advance_cursors(conn, principal, wanted) if wanted else set()
        if not wanted or moved:
            # A review's un-acked seqs follow its cursor: one whose seqs up to ``seq`` left the
            # frontier now has its cursor at ``seq``.
            return Acked(len(acks) + len(ids), {review_id: wanted[review_id] for review_id in moved})
        heads = await store.heads_of(conn, principal, list(wanted))
        for review_id, seq in wanted.items():
            if review_id not in heads:
                raise DomainError(Code.NOT_FOUND, f"No events of review {review_id} are visible to this key.")
            if seq > heads[review_id]:
                raise DomainError(
                    Code.BAD_REQUEST,
                    f"acks: seq {seq} of {review_id} is past its head ({heads[review_id]}); "
                    "ack only seqs you received.",
                )
    return Acked(len(acks) + len(ids), {})


@dataclass(frozen=True)
class AckReply:
    """What ``Ack`` answers: how many acks and broadcast ids were taken, and
    ``review_id -> (last_acked_seq, last_seq)`` of each review acked."""

    taken: int
    cursors: dict[str, tuple[int, int]]


async def ack_with_cursors(
    db: Database, principal: Principal, acks: list[tuple[str, int]], broadcast_ids: Sequence[str] = ()
) -> AckReply:
    """``Ack``: ``acknowledge``, then the cursors of the reviews acked (those it moved are known without
    a read).

    Errors: as ``acknowledge``.
    """
    acked = await acknowledge(db, principal, acks, broadcast_ids)
    found = await cursors(db, principal, [review_id for review_id, _ in acks], known=acked.cursors)
    return AckReply(acked.taken, found)


@contextlib.asynccontextmanager
async def _transaction(db: Database) -> AsyncIterator[Any]:
    """A connection in one transaction: an ack of reviews and broadcasts together is all or nothing."""
    async with db.transaction() as uow:
        yield uow.conn


async def compact(db: Database, *, retention: timedelta, inbox_retention: timedelta) -> int:
    """Delete acked nudges older than ``retention`` (un-acked ones stay, whatever their age), and
    received event ids and finished webhook deliveries older than ``inbox_retention``. Review heads and collapse keys stay, so the
    terminal guarantee and the collapse hold after compaction. Returns how many nudges went."""
    now = utcnow()
    async with db.transaction() as uow:
        removed = await store.compact(uow.conn, now - retention)
        # Finished webhook deliveries are kept as long as the outbox keeps delivered events.
        await store.prune_deliveries(uow.conn, now - inbox_retention)
    await prune(db, now - inbox_retention)
    return removed


async def sweep_forever(env: Env) -> None:
    """The retention sweep: compact every ``compact_every_s``; a failed round is logged and retried."""
    settings = env.settings
    while True:
        try:
            removed = await compact(
                env.db, retention=settings.retention, inbox_retention=settings.inbox_retention
            )
            if removed:
                log.info("compacted %d acked nudges", removed)
        except Exception:
            log.exception("nudge compaction round failed")
        await asyncio.sleep(settings.compact_every_s)
