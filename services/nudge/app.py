"""nudge use cases: ingest from the outbox relays, list, wait, subscribe, ack, compact.

One transaction each. Spec 000, "Nudge": a durable, idempotent work item; ``seq`` is the per-review
ordinal the ack cursor advances against; "Terminal events": exactly one terminal nudge per review,
the last and highest ``seq`` of its lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any

import orjson
from google.protobuf import json_format
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.eventcursor import Position
from reviewloop.ids import new_id
from reviewloop.review.v1.events_pb2 import HumansNotified, NudgeRequested
from reviewloop.rules.v1.events_pb2 import BroadcastRequested
from reviewloop.storage import Database, UnitOfWork, codec, fastpaths, utcnow
from reviewloop.storage.codec import as_json_object, encode
from reviewloop.storage.inbox import Subscription, ingest_batch
from reviewloop.storage.outbox import prune
from reviewloop.tenancy import Principal
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge import store, webhooks
from nudge.domain.payloads import Incoming, Invalid, check, check_broadcast
from nudge.domain.reasons import TERMINAL, collapse_key, refusal
from nudge.store import Nudge
from nudge.wakeup import RECHECK_S, SENDER, doorbell

log = logging.getLogger(__name__)

LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200
MAX_ACKS = 100
WAIT_MIN_S, WAIT_MAX_S = 1.0, 60.0
WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Settings:
    """The nudge service's own configuration (``__main__`` reads it from the environment)."""

    # An acked nudge older than this is compacted; un-acked nudges are never dropped.
    retention: timedelta = WEEK
    compact_every_s: float = 60.0
    # Received event ids are kept as long as the shared outbox retention, like every other inbox.
    inbox_retention: timedelta = WEEK
    webhooks: webhooks.WebhookSettings = field(default_factory=webhooks.WebhookSettings)


@dataclass(frozen=True)
class Env:
    """What the servicer and the background jobs run with."""

    db: Database
    settings: Settings = field(default_factory=Settings)


def _incoming(requested: NudgeRequested) -> Incoming:
    """The typed event as the domain's plain input; the payload is what the agent will read."""
    reason = requested.WhichOneof("payload") or ""
    return check(
        reason,
        as_json_object(getattr(requested, reason)) if reason else {},
        review_id=requested.review_id,
        org_id=requested.org_id,
        project_id=requested.project_id,
        agent_id=requested.agent_id,
        category_id=requested.category_id,
    )


@dataclass(frozen=True)
class Stored:
    """What a handler's commit makes known, and so whose doorbells ring after it."""

    project_id: str | None  # where a nudge became visible ("" every project of the org), None nowhere
    webhooks: bool = False  # webhook deliveries were queued: wake this replica's sender


async def _store(uow: UnitOfWork, requested: NudgeRequested) -> Stored | None:
    """Append the requested nudge with the review's next seq; None when refused or collapsed. An event that is invalid or breaks the terminal guarantee is
    logged and refused, never stored, and still counts as received: the relay must not retry it
    forever."""
    try:
        incoming = _incoming(requested)
    except Invalid as exc:
        log.error("refused nudge event for %s: %s", requested.review_id, exc)
        return None
    conn = uow.conn  # holding the project's append lock (``_lock_projects``)
    head = await store.lock_head(conn, incoming)
    taken = await _next(conn, incoming, head, head.last_seq, list(head.terminal_reasons))
    if taken is None:
        return None
    seq, terminal = taken
    nudge_id, created_at = new_id("ndg"), utcnow()
    await store.append(
        conn, incoming, nudge_id=nudge_id, seq=seq, terminal_reasons=terminal, created_at=created_at
    )
    queued = await webhooks.enqueue(conn, incoming, nudge_id, seq, created_at)
    return Stored(incoming.project_id, queued)


async def _next(
    conn: AsyncConnection, incoming: Incoming, head: Row[Any], last_seq: int, terminal: list[str]
) -> tuple[int, list[str]] | None:
    """The seq ``incoming`` takes after ``last_seq`` and the review's terminal reasons with it; None
    (logged) when it names another owner than the review's ``head``, breaks the terminal guarantee or
    collapses into an earlier nudge (claiming its collapse key otherwise)."""
    if (head.org_id, head.project_id, head.agent_id) != (
        incoming.org_id,
        incoming.project_id,
        incoming.agent_id,
    ):
        log.error(
            "refused nudge for %s: it names another tenant or agent than its earlier nudges", head.review_id
        )
        return None
    why_not = refusal(incoming.reason, terminal)
    if why_not:
        log.error("refused nudge for %s: %s", incoming.review_id, why_not)
        return None
    seq = last_seq + 1
    key = collapse_key(incoming.review_id, incoming.reason, incoming.payload)
    if key is not None and not await store.claim_collapse_key(conn, key, incoming.review_id, seq):
        log.info("collapsed %s for %s into its earlier nudge (%s)", incoming.reason, incoming.review_id, key)
        return None
    return seq, [*terminal, incoming.reason.value] if incoming.reason in TERMINAL else terminal


async def _humans_notified(uow: UnitOfWork, event: HumansNotified) -> Stored:
    """Not a nudge (the agent already has its ``sent``): the deliveries of the webhooks that asked
    for ``humans_notified``."""
    return Stored(None, await webhooks.enqueue_humans_notified(uow.conn, event, utcnow()))


async def _store_broadcast(uow: UnitOfWork, requested: BroadcastRequested) -> Stored | None:
    """Append a broadcast (a project-wide nudge, visible in its project or, with project "", in every
    project of the org); None when refused: logged, never stored, and still counted as received."""
    reason = requested.WhichOneof("payload") or ""
    try:
        broadcast = check_broadcast(
            reason,
            as_json_object(getattr(requested, reason)) if reason else {},
            broadcast_id=new_id("ndg"),
            org_id=requested.org_id,
            project_id=requested.project_id,
            agent_id=requested.agent_id,
            category_id=requested.category_id,
        )
    except Invalid as exc:
        log.error("refused broadcast event for %s: %s", requested.org_id, exc)
        return None
    created_at = utcnow()  # holding the org's broadcast lock (``_lock_projects``)
    await store.append_broadcast(uow.conn, broadcast, created_at=created_at)
    queued = await webhooks.enqueue_broadcast(uow.conn, broadcast, created_at)
    return Stored(broadcast.project_id, queued)


# Each stored nudge, once committed, rings the doorbell of the project it became visible in.
SUBSCRIPTIONS: dict[str, Subscription[Any]] = {
    "nudge": Subscription(NudgeRequested, _store),
    "humans_notified": Subscription(HumansNotified, _humans_notified),
    "broadcast": Subscription(BroadcastRequested, _store_broadcast),
}


def on_commit(db: Database) -> Callable[[Stored], None]:
    """What ``ingest_batch`` calls with a handler's result after its commit: ring the waiters of the
    project the nudge became visible in, and the webhook sender when deliveries were queued (a replica
    that queued none does not wake its sender: on every nudge that was a query for nothing)."""
    bell = doorbell(db)

    def ring(stored: Stored) -> None:
        if stored.project_id is not None:
            bell.ring(stored.project_id)
        if stored.webhooks:
            bell.ring(SENDER)

    return ring


async def ingest(db: Database, events: Iterable[common_pb2.Event]) -> tuple[int, int]:
    """Store each ``nudge`` event once (deduplicated on event_id), assigning the review's next seq.

    Returns (accepted, duplicates), as the ``Ingest`` RPC answers them.
    """
    batch = [_legacy_dict_event(event) for event in events]
    if (
        fastpaths.BATCH_INGEST in db.fast_paths
        and not db.is_sqlite
        and batch
        and all(event.type == "nudge" for event in batch)
    ):
        try:
            return await _ingest_nudges(db, batch)
        except Exception:
            log.warning(
                "a batch of %d nudges failed set-based; handling it event by event", len(batch), exc_info=True
            )
    done = await ingest_batch(db, batch, SUBSCRIPTIONS, on_commit(db), prepare=_lock_projects)
    return done.accepted, done.duplicates


async def _ingest_nudges(db: Database, batch: Sequence[common_pb2.Event]) -> tuple[int, int]:
    """A batch of ``nudge`` events stored set-based on PostgreSQL, storing exactly what ``_store`` does
    event by event: the inbox dedupe in one statement, the heads locked in one, the nudges, frontier rows,
    head advances and announcements in one, the webhook deliveries with one endpoints read per project.
    Seqs, refusals and collapses are decided here in batch order against the locked heads."""
    decoded: list[NudgeRequested | json_format.ParseError] = []  # each parsed once: locks and nudges
    for event in batch:
        try:
            decoded.append(codec.decode(event.payload, NudgeRequested))
        except json_format.ParseError as exc:
            decoded.append(exc)
    async with db.transaction() as uow:
        conn = uow.conn
        await _lock(uow, {m.project_id for m in decoded if isinstance(m, NudgeRequested)}, set())
        fresh = await store.first_deliveries(conn, [event.event_id for event in batch], utcnow())
        accepted, valid = 0, []
        for event, requested in zip(batch, decoded, strict=True):
            if event.event_id not in fresh:
                continue
            fresh.discard(event.event_id)  # a repeat within the batch is a duplicate
            accepted += 1
            if isinstance(requested, json_format.ParseError):
                log.error("dropped an unreadable nudge event (%s): %s", event.event_id, requested)
                continue
            try:
                valid.append(_incoming(requested))
            except Invalid as exc:
                log.error("refused nudge event (%s): %s", event.event_id, exc)
        firsts = {incoming.review_id: incoming for incoming in reversed(valid)}
        heads = await store.lock_heads(conn, list(firsts.values())) if firsts else {}
        state = {review_id: (row.last_seq, list(row.terminal_reasons)) for review_id, row in heads.items()}
        added: list[store.Appended] = []
        for incoming in valid:
            taken = await _next(conn, incoming, heads[incoming.review_id], *state[incoming.review_id])
            if taken is None:
                continue
            state[incoming.review_id] = taken
            seq = taken[0]
            added.append(store.Appended(incoming, new_id("ndg"), seq, utcnow()))
        queued = False
        if added:
            advanced = {a.incoming.review_id: state[a.incoming.review_id] for a in added}
            await store.append_many(conn, added, advanced)
            queued = await webhooks.enqueue_many(conn, added)
    ring = on_commit(db)
    for project_id in dict.fromkeys(a.incoming.project_id for a in added):
        ring(Stored(project_id))
    if queued:
        ring(Stored(None, webhooks=True))
    return accepted, len(batch) - accepted


async def _lock_projects(uow: UnitOfWork, events: Sequence[common_pb2.Event]) -> None:
    """Take the append locks of every project (and org, for broadcasts) the events name, in one order,
    before any append: two batches naming the same projects then queue instead of deadlocking. The
    handlers append under these locks and take none themselves."""
    projects, orgs = set(), set()
    for event in events:
        with contextlib.suppress(json_format.ParseError):
            if event.type == "nudge":
                projects.add(codec.decode(event.payload, NudgeRequested).project_id)
            elif event.type == "broadcast":
                orgs.add(codec.decode(event.payload, BroadcastRequested).org_id)
    await _lock(uow, projects, orgs)


async def _lock(uow: UnitOfWork, projects: set[str], orgs: set[str]) -> None:
    """The append locks of ``projects`` and the broadcast locks of ``orgs``, in one order."""
    await store.lock_projects(uow.conn, sorted(projects))
    for org_id in sorted(orgs):
        await store.lock_broadcasts(uow.conn, org_id)


def _legacy_dict_event(event: common_pb2.Event) -> common_pb2.Event:
    """A ``nudge`` event in the envelope of contract 0.1.0-pre.6 (``{reason, ..., payload}``), rewritten as
    the ``NudgeRequested`` it stands for; every other event as it came.

    An upgrade finds such rows still waiting in review_state's outbox: without this they would be
    dropped as unreadable, terminal nudges among them. One the typed message cannot hold is left as it
    came, so the inbox drops it (logged). Delete once no deployment runs 0.1.0-pre.6.
    """
    try:
        body = orjson.loads(event.payload)
    except orjson.JSONDecodeError:
        return event
    if event.type != "nudge" or not isinstance(body, dict) or "reason" not in body:
        return event
    reason, payload = body.pop("reason"), body.pop("payload", {})
    try:
        requested = json_format.ParseDict({**body, str(reason): payload}, NudgeRequested())
    except (json_format.ParseError, TypeError, ValueError):
        return event
    typed = common_pb2.Event()
    typed.CopyFrom(event)
    typed.payload = encode(requested).encode()
    return typed


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
                await asyncio.wait_for(rung.wait(), min(remaining, RECHECK_S))


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
                    await asyncio.wait_for(rung.wait(), RECHECK_S)


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
