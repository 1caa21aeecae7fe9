"""Ingest (spec 000, "Nudge"): the outbox relays' batches stored once each, a review's next ``seq``
assigned under its project's append lock; refusals, collapses and the terminal guarantee
("Terminal events": exactly one terminal nudge per review, the last and highest ``seq``).

Two paths store the same rows: ``SUBSCRIPTIONS`` through the shared inbox, event by event, and
``_ingest_nudges``, set-based on PostgreSQL (``fastpaths.BATCH_INGEST``; tests/nudge/test_batch.py holds
them equal)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from google.protobuf import json_format
from reviewloop.common.v1 import common_pb2
from reviewloop.ids import new_id
from reviewloop.review.v1.events_pb2 import Escalated, HumansNotified, NudgeRequested
from reviewloop.rules.v1.events_pb2 import BroadcastRequested
from reviewloop.storage import Database, UnitOfWork, codec, fastpaths, utcnow
from reviewloop.storage.codec import as_json_object, encode
from reviewloop.storage.inbox import Subscription, ingest_batch
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge import store
from nudge.app import webhook_queue
from nudge.domain.payloads import Incoming, Invalid, check, check_broadcast
from nudge.domain.reasons import TERMINAL, collapse_key, refusal
from nudge.wakeup import SENDER, doorbell

log = logging.getLogger(__name__)


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
    queued = await webhook_queue.enqueue(conn, incoming, nudge_id, seq, created_at)
    return Stored(incoming.project_id, queued)


async def _next(
    conn: AsyncConnection, incoming: Incoming, head: store.Head, last_seq: int, terminal: list[str]
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
    return Stored(None, await webhook_queue.enqueue_humans_notified(uow.conn, event, utcnow()))


async def _escalated(uow: UnitOfWork, event: Escalated) -> Stored:
    """Not a nudge (the agent has its ``redraft_requested``): the deliveries of the webhooks that asked
    for ``escalated``."""
    return Stored(None, await webhook_queue.enqueue_escalated(uow.conn, event, utcnow()))


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
    queued = await webhook_queue.enqueue_broadcast(uow.conn, broadcast, created_at)
    return Stored(broadcast.project_id, queued)


# Each stored nudge, once committed, rings the doorbell of the project it became visible in.
SUBSCRIPTIONS: dict[str, Subscription[Any]] = {
    "nudge": Subscription(NudgeRequested, _store),
    "humans_notified": Subscription(HumansNotified, _humans_notified),
    "escalated": Subscription(Escalated, _escalated),
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
        # The fallback below is kept: a batch the set-based path fails as one is then stored event by
        # event, each event that can be (tests/nudge/test_app.py,
        # test_a_batch_that_fails_as_one_stores_each_event_that_can_be).
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
    event by event, in two statements: the project locks, the inbox dedupe, the heads locked and the
    webhook endpoints read in one (``store.begin_batch``), the nudges, frontier rows, head advances,
    webhook deliveries and announcements in the other. Seqs, refusals and collapses are decided here in
    batch order against the locked heads."""
    # Each event parsed once, before the first statement.
    readable: list[Incoming | json_format.ParseError | Invalid] = []
    for event in batch:
        try:
            readable.append(_incoming(codec.decode(event.payload, NudgeRequested)))
        except (json_format.ParseError, Invalid) as exc:
            readable.append(exc)
    # Every readable event's review is locked, a redelivered one's too: its head exists already (its
    # first delivery made it), so locking it changes nothing.
    firsts = {i.review_id: i for i in reversed(readable) if isinstance(i, Incoming)}
    async with db.transaction() as uow:
        conn = uow.conn
        begun = await store.begin_batch(conn, [e.event_id for e in batch], list(firsts.values()), utcnow())
        fresh, accepted, valid = begun.fresh, 0, []
        for event, incoming in zip(batch, readable, strict=True):
            if event.event_id not in fresh:
                continue
            fresh.discard(event.event_id)  # a repeat within the batch is a duplicate
            accepted += 1
            if isinstance(incoming, json_format.ParseError):
                log.error("dropped an unreadable nudge event (%s): %s", event.event_id, incoming)
            elif isinstance(incoming, Invalid):
                log.error("refused nudge event (%s): %s", event.event_id, incoming)
            else:
                valid.append(incoming)
        heads = begun.heads
        state = {review_id: (row.last_seq, list(row.terminal_reasons)) for review_id, row in heads.items()}
        added: list[store.Appended] = []
        for incoming in valid:
            taken = await _next(conn, incoming, heads[incoming.review_id], *state[incoming.review_id])
            if taken is None:
                continue
            state[incoming.review_id] = taken
            added.append(store.Appended(incoming, new_id("ndg"), taken[0], utcnow()))
        deliveries = webhook_queue.deliveries_of_many(begun.endpoints, added)
        if added:
            advanced = {a.incoming.review_id: state[a.incoming.review_id] for a in added}
            await store.append_many(conn, added, advanced, deliveries)
    ring = on_commit(db)
    for project_id in dict.fromkeys(a.incoming.project_id for a in added):
        ring(Stored(project_id))
    if deliveries:
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
