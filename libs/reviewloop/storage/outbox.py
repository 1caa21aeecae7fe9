"""The outbox relay: delivers each service's outbox rows to the subscriber's gRPC ``Ingest``.

Order is kept per aggregate: a relay only claims the *head* (oldest undelivered row) of each
aggregate, leases it, delivers it and marks it delivered; the next row of that aggregate becomes the
head only then. On PostgreSQL the claim is ``FOR UPDATE SKIP LOCKED`` so replicas share the work; a
lease that outlives a crashed relay simply expires. Delivery is at-least-once; receivers deduplicate
on ``event_id`` (``schema.first_delivery``).

Three kinds of failure. A receiver that is down (UNAVAILABLE, a deadline) backs off the whole
destination and charges no row, so when it returns the backlog goes out in outbox order. A receiver that
refuses an event for good (INVALID_ARGUMENT, FAILED_PRECONDITION: a malformed body, an event its state
can never take) makes it a dead letter: set aside with the reason (``dead_at``, ``last_error``), counted
for metrics and listed for an admin, so the aggregate's later events go on. Once the cause is fixed an admin
retries it (back to the relay) or discards it with a reason. Any other failure backs off
that row only, holding back its aggregate and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry import trace
from sqlalchemy import Integer, Row, bindparam, case, delete, exists, func, select, update
from sqlalchemy.orm import aliased

from reviewloop.common.v1 import common_pb2
from reviewloop.storage.engine import Database
from reviewloop.storage.schema import INBOX, OUTBOX, utcnow
from reviewloop.telemetry import REVIEW_ID, context_from_traceparent, tracer

log = logging.getLogger(__name__)

# A claim's lease, renewed every third of it while its relay lives: rows a crashed relay held are
# claimable again within seconds, while a live relay keeps a slow delivery to itself.
LEASE = timedelta(seconds=3)
MAX_BACKOFF_S = 30.0
MAX_DESTINATION_BACKOFF_S = 10.0
RECEIVER_DOWN = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
# A receiver answers these only when retrying the same event can never succeed.
REFUSED_FOR_GOOD = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION})
PRUNE_EVERY_S = 60.0

Deliver = Callable[[common_pb2.Event], Awaitable[None]]


class IngestMethod:
    """A ``Deliver`` that calls ``<service>/Ingest``; ``many`` sends a batch of events in one call."""

    def __init__(self, channel: grpc.aio.Channel, service_full_name: str) -> None:
        self._call = channel.unary_unary(
            f"/{service_full_name}/Ingest",
            request_serializer=common_pb2.IngestRequest.SerializeToString,
            response_deserializer=common_pb2.IngestResponse.FromString,
        )

    async def __call__(self, event: common_pb2.Event) -> None:
        """Deliver one event."""
        await self.many([event])

    async def many(self, events: Sequence[common_pb2.Event]) -> None:
        """Deliver ``events`` in one call: the receiver stores them in order, all or none."""
        await self._call(common_pb2.IngestRequest(events=events), timeout=10)


def ingest_method(channel: grpc.aio.Channel, service_full_name: str) -> IngestMethod:
    """A ``Deliver`` that calls ``<service>/Ingest`` on ``channel``, batches included."""
    return IngestMethod(channel, service_full_name)


class Undelivered(Exception):
    """A local subscriber's failure, classed as a receiver's gRPC status is.

    A local subscriber is a destination the service delivers itself, not a peer's ``Ingest``; its failure
    is down, refused for good, or anything else, as a receiver's.
    """

    def __init__(self, code: grpc.StatusCode, text: str) -> None:
        super().__init__(text)
        self.code = code


@dataclass(frozen=True)
class Failure:
    """Why one delivery failed: the receiver's gRPC status and the text recorded as ``last_error``."""

    code: grpc.StatusCode
    text: str


def backoff_s(attempts: int) -> float:
    """Seconds to wait after ``attempts`` failures: 0.2 s doubling per failure, capped at 30 s."""
    return float(min(MAX_BACKOFF_S, 0.2 * 2 ** min(attempts, 10)))


def _claim_statement() -> Any:
    """``UPDATE outbox SET claimed_until = :until WHERE id IN (the heads) RETURNING *``.

    A head is the oldest undelivered, live row of its (destination, aggregate): one relay claims it at a
    time, so an aggregate's events go out in order. Built once: a relay's poll builds no statement and
    walks no cache key.
    """
    head = aliased(OUTBOX)
    earlier = aliased(OUTBOX)
    is_head = ~exists().where(
        earlier.c.destination == head.c.destination,
        earlier.c.aggregate_id == head.c.aggregate_id,
        earlier.c.delivered_at.is_(None),
        earlier.c.dead_at.is_(None),
        earlier.c.id < head.c.id,
    )
    now = bindparam("now", type_=OUTBOX.c.claimed_until.type)
    heads = (
        select(head.c.id)
        .where(
            head.c.delivered_at.is_(None),
            head.c.dead_at.is_(None),
            head.c.destination.in_(bindparam("reachable", expanding=True)),
            head.c.next_attempt_at <= now,
            head.c.claimed_until.is_(None) | (head.c.claimed_until < now),
            is_head,
        )
        .order_by(head.c.id)
        .limit(bindparam("limit", type_=Integer))
        .with_for_update(skip_locked=True, of=head)
    )
    return (
        update(OUTBOX)
        .where(OUTBOX.c.id.in_(heads.scalar_subquery()))
        .values(claimed_until=bindparam("until", type_=OUTBOX.c.claimed_until.type))
        .returning(*OUTBOX.c)
    )


_CLAIM = _claim_statement()
_DELIVERED = (
    update(OUTBOX)
    .where(OUTBOX.c.id.in_(bindparam("ids", expanding=True)))
    .values(
        claimed_until=None, delivered_at=bindparam("now", type_=OUTBOX.c.delivered_at.type), last_error=None
    )
)


@dataclass
class Relay:
    """Relays one store's outbox to its subscribers (destination name -> deliver function)."""

    db: Database
    subscribers: Mapping[str, Deliver]
    poll_interval_s: float = 0.5
    batch_size: int = 100
    # Delivered rows (and the inbox's seen event ids) older than this are deleted.
    retention: timedelta = timedelta(days=7)

    def __post_init__(self) -> None:
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.db.after_commit.append(self._wake.set)
        # Per destination: consecutive "receiver down" failures and when to try it again (monotonic).
        self._down_failures: dict[str, int] = {}
        self._down_until: dict[str, float] = {}

    def start(self) -> None:
        """Start relaying in a background task on the running event loop."""
        self._task = asyncio.create_task(self._run(), name="outbox-relay")

    @property
    def running(self) -> bool:
        """Whether the relay task is alive (readiness: a dead relay would strand the outbox)."""
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Cancel the relay task and wait for it; undelivered rows stay for the next start."""
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        last_prune = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                if loop.time() - last_prune > PRUNE_EVERY_S:
                    last_prune = loop.time()
                    await prune(self.db, utcnow() - self.retention)
                # Cleared before the pass, not after it: a commit landing during an empty pass still
                # wakes the next one at once instead of waiting for the poll interval.
                self._wake.clear()
                delivered = await self.drain_once()
            except Exception:  # the store is briefly unreachable: log and keep the relay alive
                log.exception("outbox relay round failed")
                delivered = 0
            if delivered:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)

    async def drain_once(self) -> int:
        """Claim the current heads, deliver them in outbox order, and record each outcome.

        Returns:
            How many rows were settled (delivered, or set aside as dead letters, which frees the next row
            of their aggregate); 0 tells the loop to wait for a commit or the poll interval.
        """
        claimed = await self._claim()
        if not claimed:
            return 0
        pending = {row.id for row in claimed}
        renewing = asyncio.create_task(self._renew(pending), name="outbox-lease")
        try:
            return await self._deliver_claimed(claimed, pending)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def _renew(self, pending: set[int]) -> None:
        """Extend the lease of the rows this round still holds until the round ends."""
        while True:
            await asyncio.sleep(LEASE.total_seconds() / 3)
            if not pending:
                return
            try:
                async with self.db.writing() as conn:
                    await conn.execute(
                        update(OUTBOX)
                        .where(OUTBOX.c.id.in_(list(pending)), OUTBOX.c.claimed_until.is_not(None))
                        .values(claimed_until=utcnow() + LEASE)
                    )
            except Exception:  # the store is briefly unreachable: the next beat tries again
                log.exception("outbox lease renewal failed")

    async def _deliver_claimed(self, claimed: list[Row[Any]], pending: set[int]) -> int:
        """Deliver each destination's rows, then record every outcome in one transaction.

        A destination that takes batches (``many``) gets its rows in one call; when that call fails for
        any reason but the receiver being down, its rows go one at a time to find the one at fault.
        """
        outcomes: dict[int, dict[str, object] | None] = {}  # None: delivered
        by_destination: dict[str, list[Row[Any]]] = {}
        for row in claimed:
            by_destination.setdefault(row.destination, []).append(row)
        for destination, rows in by_destination.items():
            many = getattr(self.subscribers[destination], "many", None)
            if many is not None and len(rows) > 1 and not self._is_down(destination):
                failure = await self._deliver_batch(rows, many)
                if failure is None:
                    self._down_failures.pop(destination, None)
                    outcomes.update((row.id, None) for row in rows)
                    continue
                if failure.code in RECEIVER_DOWN:
                    self._mark_down(destination)
                    outcomes.update(
                        (row.id, {"claimed_until": None, "last_error": failure.text}) for row in rows
                    )
                    continue
                # One event of the batch failed it: find which, one at a time, as below.
            for row in rows:
                outcomes[row.id] = await self._deliver_one(row)
        delivered = [row_id for row_id, values in outcomes.items() if values is None]
        if len(delivered) == len(outcomes):  # the usual round: one statement, no transaction around it
            async with self.db.one_statement() as conn:
                await conn.execute(_DELIVERED, {"ids": delivered, "now": utcnow()})
        else:
            async with self.db.transaction() as uow:
                if delivered:
                    await uow.conn.execute(_DELIVERED, {"ids": delivered, "now": utcnow()})
                for row_id, values in outcomes.items():
                    if values is not None:
                        await uow.conn.execute(update(OUTBOX).where(OUTBOX.c.id == row_id).values(**values))
        pending.clear()
        # Settled: delivered, or set aside as a dead letter (which frees its aggregate's next row).
        return len(delivered) + sum(1 for values in outcomes.values() if values and "dead_at" in values)

    async def _deliver_one(self, row: Row[Any]) -> dict[str, object] | None:
        """Deliver one row; None when delivered, else the values that record its outcome."""
        values: dict[str, object] = {"claimed_until": None}
        if self._is_down(row.destination):
            return values  # the receiver went down earlier in this round: hand the claim back untouched
        failure = await self._deliver(row)
        if failure is None:
            self._down_failures.pop(row.destination, None)
            return None
        if failure.code in RECEIVER_DOWN:
            self._mark_down(row.destination)
            values.update(last_error=failure.text)
        elif failure.code in REFUSED_FOR_GOOD:
            log.error(
                "outbox event %s to %s is a dead letter: %s", row.event_id, row.destination, failure.text
            )
            values.update(attempts=row.attempts + 1, dead_at=utcnow(), last_error=failure.text)
        else:
            values.update(
                attempts=row.attempts + 1,
                next_attempt_at=utcnow() + timedelta(seconds=backoff_s(row.attempts)),
                last_error=failure.text,
            )
        return values

    def _is_down(self, destination: str) -> bool:
        return self._down_until.get(destination, 0.0) > time.monotonic()

    def _mark_down(self, destination: str) -> None:
        failures = self._down_failures.get(destination, 0)
        self._down_failures[destination] = failures + 1
        pause = min(MAX_DESTINATION_BACKOFF_S, backoff_s(failures))
        self._down_until[destination] = time.monotonic() + pause

    async def _claim(self) -> list[Row[Any]]:
        """Lease the current heads of the reachable destinations, in outbox order.

        One statement: autocommit on PostgreSQL, where replicas skip each other's locked rows.
        """
        reachable = [d for d in self.subscribers if not self._is_down(d)]
        if not reachable:
            return []
        now = utcnow()
        params = {"now": now, "until": now + LEASE, "reachable": reachable, "limit": self.batch_size}
        async with self.db.one_statement() as conn:
            rows = list((await conn.execute(_CLAIM, params)).all())
        return sorted(rows, key=lambda row: row.id)

    async def _deliver(self, row: Row[Any]) -> Failure | None:
        with tracer.start_as_current_span(
            f"outbox.relay {row.type}",
            context=context_from_traceparent(row.traceparent),
            attributes={
                "reviewloop.event_id": row.event_id,
                "reviewloop.destination": row.destination,
                **({REVIEW_ID: row.aggregate_id} if row.aggregate_id.startswith("rr_") else {}),
            },
        ):
            try:
                await self.subscribers[row.destination](as_event(row))
            except grpc.aio.AioRpcError as exc:
                log.warning("outbox delivery to %s failed: %s", row.destination, exc.code())
                return _failed(exc.code(), f"{exc.code().name}: {exc.details()}")
            except Undelivered as exc:
                log.warning("outbox delivery to %s failed: %s", row.destination, exc.code)
                return _failed(exc.code, f"{exc.code.name}: {exc}")
        return None

    async def _deliver_batch(
        self, rows: list[Row[Any]], many: Callable[[Sequence[common_pb2.Event]], Awaitable[None]]
    ) -> Failure | None:
        """Deliver ``rows`` (one destination's, in outbox order) in one call.

        One span, linked to the trace of every row, so each review's trace still reaches its delivery.
        """
        links = [
            trace.Link(context)
            for row in rows
            if (
                context := trace.get_current_span(
                    context_from_traceparent(row.traceparent)
                ).get_span_context()
            ).is_valid
        ]
        with tracer.start_as_current_span(
            f"outbox.relay batch of {len(rows)}",
            links=links,
            attributes={
                "reviewloop.destination": rows[0].destination,
                "reviewloop.event_id": [row.event_id for row in rows],
                REVIEW_ID: [row.aggregate_id for row in rows if row.aggregate_id.startswith("rr_")],
            },
        ):
            try:
                await many([as_event(row) for row in rows])
            except grpc.aio.AioRpcError as exc:
                log.warning("outbox batch delivery to %s failed: %s", rows[0].destination, exc.code())
                return _failed(exc.code(), f"{exc.code().name}: {exc.details()}")
        return None


def _failed(code: grpc.StatusCode, text: str) -> Failure:
    """A failed delivery, its span ended in error: ``telemetry.KeepErrors`` keeps an unsampled trace that fails."""
    failure = Failure(code, text[:1000])
    trace.get_current_span().set_status(trace.Status(trace.StatusCode.ERROR, failure.text))
    return failure


def as_event(row: Row[Any]) -> common_pb2.Event:
    """An outbox row as the event its receiver ingests."""
    occurred = Timestamp()
    occurred.FromDatetime(row.occurred_at)
    return common_pb2.Event(
        event_id=row.event_id,
        aggregate_id=row.aggregate_id,
        type=row.type,
        payload=row.payload.encode(),
        traceparent=row.traceparent,
        occurred_at=occurred,
    )


def outbox_probe(
    db: Database,
) -> Callable[[], Awaitable[Mapping[str, Sequence[tuple[float, Mapping[str, str]]]]]]:
    """The metrics probe of a relayed outbox, per destination.

    The backlog (undelivered, not dead), its oldest row's age, the rows a receiver refused at least
    once, and the dead letters: one aggregate query over the undelivered rows (``delivered_at IS NULL``), which a healthy outbox
    keeps small.
    """

    async def probe() -> Mapping[str, Sequence[tuple[float, Mapping[str, str]]]]:
        dead = OUTBOX.c.dead_at.is_not(None) & OUTBOX.c.discarded_at.is_(None)
        live = OUTBOX.c.dead_at.is_(None)
        query = (
            select(
                OUTBOX.c.destination,
                func.sum(case((live, 1), else_=0)),
                func.min(case((live, OUTBOX.c.occurred_at))),
                func.sum(case((live & (OUTBOX.c.attempts > 0), 1), else_=0)),
                func.sum(case((dead, 1), else_=0)),
            )
            .where(OUTBOX.c.delivered_at.is_(None))
            .group_by(OUTBOX.c.destination)
        )
        async with db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        now = utcnow()
        return {
            "reviewloop.outbox.backlog": [(float(n or 0), {"destination": d}) for d, n, *_ in rows],
            "reviewloop.outbox.oldest_age": [
                ((now - as_utc(oldest)).total_seconds(), {"destination": d})
                for d, _, oldest, *_ in rows
                if oldest is not None
            ],
            "reviewloop.outbox.retrying": [(float(r or 0), {"destination": d}) for d, _, _, r, _ in rows],
            "reviewloop.outbox.dead_letters": [(float(x or 0), {"destination": d}) for d, *_, x in rows],
        }

    return probe


def as_utc(value: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite hands aggregates back naive)."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class DeadLetter:
    """An event its receiver refused for good, and why."""

    event_id: str
    destination: str
    aggregate_id: str
    type: str
    occurred_at: datetime
    dead_at: datetime
    reason: str
    project_id: str = ""
    attempts: int = 0


def _dead_letter(r: Row[Any]) -> DeadLetter:
    return DeadLetter(
        r.event_id,
        r.destination,
        r.aggregate_id,
        r.type,
        as_utc(r.occurred_at),
        as_utc(r.dead_at),
        r.last_error or "",
        r.project_id or "",
        r.attempts,
    )


# A dead letter still set aside: neither retried nor discarded.
_DEAD = OUTBOX.c.dead_at.is_not(None) & OUTBOX.c.discarded_at.is_(None)


def _dead_letter_where(event_id: str, project_id: str | None) -> Any:
    where = _DEAD & (OUTBOX.c.event_id == event_id)
    return where if project_id is None else where & (OUTBOX.c.project_id == project_id)


async def dead_letter_count(db: Database) -> int:
    """How many events of this store are dead letters (a gauge for metrics)."""
    async with db.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).where(_DEAD))).scalar_one())


async def dead_letters(db: Database, limit: int = 100, project_id: str | None = None) -> list[DeadLetter]:
    """This store's dead letters (of ``project_id`` only, when given), newest first, for an admin."""
    query = select(OUTBOX).where(_DEAD)
    if project_id is not None:
        query = query.where(OUTBOX.c.project_id == project_id)
    query = query.order_by(OUTBOX.c.dead_at.desc(), OUTBOX.c.id.desc()).limit(limit)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [_dead_letter(r) for r in rows]


async def retry_dead_letter(db: Database, event_id: str, project_id: str | None = None) -> DeadLetter | None:
    """Hand dead letter ``event_id`` (of ``project_id``, when given) back to the relay, as if new.

    Returns:
        The dead letter as it was, or None when there is no such dead letter (delivered, already
        retried or discarded, another project's).
    """
    async with db.writing() as conn:
        row = (
            await conn.execute(
                select(OUTBOX).where(_dead_letter_where(event_id, project_id)).with_for_update()
            )
        ).first()
        if row is None:
            return None
        await conn.execute(
            update(OUTBOX)
            .where(OUTBOX.c.id == row.id)
            .values(dead_at=None, attempts=0, next_attempt_at=utcnow(), claimed_until=None)
        )
    log.warning("outbox dead letter %s to %s retried by an admin", event_id, row.destination)
    for wake in db.after_commit:  # the relays of this process go at once instead of at their next poll
        wake()
    return _dead_letter(row)


async def discard_dead_letter(
    db: Database, event_id: str, reason: str, project_id: str | None = None
) -> DeadLetter | None:
    """Give up on dead letter ``event_id`` (of ``project_id``, when given): it is never relayed.

    The row stays, with ``reason``, until pruned like a delivered row.

    Returns:
        The dead letter as it was, or None when there is no such dead letter.
    """
    async with db.writing() as conn:
        row = (
            await conn.execute(
                select(OUTBOX).where(_dead_letter_where(event_id, project_id)).with_for_update()
            )
        ).first()
        if row is None:
            return None
        await conn.execute(
            update(OUTBOX).where(OUTBOX.c.id == row.id).values(discarded_at=utcnow(), discard_reason=reason)
        )
    log.warning("outbox dead letter %s to %s discarded by an admin: %s", event_id, row.destination, reason)
    return _dead_letter(row)


async def prune(db: Database, before: datetime) -> None:
    """Forget delivered (or discarded) outbox rows and received event ids older than ``before``."""
    async with db.transaction() as uow:
        await uow.conn.execute(
            delete(OUTBOX).where((OUTBOX.c.delivered_at < before) | (OUTBOX.c.discarded_at < before))
        )
        await uow.conn.execute(delete(INBOX).where(INBOX.c.received_at < before))
