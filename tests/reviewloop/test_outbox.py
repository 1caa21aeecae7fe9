"""The outbox relay: order per aggregate, retry with backoff, and replicas sharing one outbox."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.wrappers_pb2 import Int32Value
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from review_state.__main__ import SPEC
from reviewloop.common.v1 import common_pb2
from reviewloop.diff.v1.diff_pb2 import DiffCommitted
from reviewloop.review.v1.events_pb2 import NudgeRequested
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, first_delivery, utcnow
from reviewloop.storage.outbox import (
    Relay,
    dead_letter_count,
    dead_letters,
    discard_dead_letter,
    prune,
    retry_dead_letter,
)
from reviewloop.storage.schema import INBOX, OUTBOX
from reviewloop.telemetry import REVIEW_ID, KeepErrors, TelemetrySettings, sampler
from sqlalchemy import func, select, text

from tests.statements import statements

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


class Refused(grpc.aio.AioRpcError):
    """What a receiver answers: UNAVAILABLE when it is down, INTERNAL when one event fails it for now,
    INVALID_ARGUMENT when it refuses one event for good."""

    def __init__(self, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), code.name)


def number(event: common_pb2.Event) -> int:
    return int(event.payload)  # an Int32Value's proto3 JSON is the bare number


async def write_events(db: Database, per_aggregate: int, aggregates: int) -> None:
    for n in range(per_aggregate):
        async with db.transaction() as uow:
            for a in range(aggregates):
                uow.emit("nudge", f"rr_{a}", "nudge", Int32Value(value=n))


async def drain(relays: list[Relay]) -> None:
    while sum(await asyncio.gather(*(r.drain_once() for r in relays))):
        pass


async def test_a_refused_head_holds_back_its_aggregate_only(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=3, aggregates=2)
    seen: list[tuple[str, int]] = []
    down = {"rr_0"}

    async def deliver(event: common_pb2.Event) -> None:
        if event.aggregate_id in down:
            raise Refused(grpc.StatusCode.INTERNAL)
        seen.append((event.aggregate_id, number(event)))

    # A fixed backoff: a slow pass on a loaded machine may retry the head, but never pushes it further out.
    monkeypatch.setattr("reviewloop.storage.outbox.backoff_s", lambda attempts: 0.5)
    relay = Relay(db, {"nudge": deliver})
    await drain([relay])
    assert seen == [("rr_1", 0), ("rr_1", 1), ("rr_1", 2)]

    down.clear()
    for _ in range(100):  # until the head's backoff expires and its aggregate follows it
        await drain([relay])
        if len(seen) == 6:
            break
        await asyncio.sleep(0.1)
    assert seen[3:] == [("rr_0", 0), ("rr_0", 1), ("rr_0", 2)]


async def test_a_receiver_that_was_down_gets_the_backlog_in_outbox_order(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=2, aggregates=3)  # ids: rr_0, rr_1, rr_2, rr_0, rr_1, rr_2
    receiver_up = False
    calls = 0
    seen: list[tuple[str, int]] = []

    async def deliver(event: common_pb2.Event) -> None:
        nonlocal calls
        calls += 1
        if not receiver_up:
            raise Refused()
        seen.append((event.aggregate_id, number(event)))

    # The backoff outlasts a round on a busy machine, so each round probes exactly once.
    monkeypatch.setattr("reviewloop.storage.outbox.backoff_s", lambda failures: 0.3)
    relay = Relay(db, {"nudge": deliver})
    for _ in range(3):  # rounds while the receiver is down: one probe each, no row charged
        await relay.drain_once()
        await asyncio.sleep(0.31)
    assert calls == 3
    async with db.engine.connect() as conn:
        attempts = (await conn.execute(select(OUTBOX.c.attempts))).scalars().all()
    assert set(attempts) == {0}

    receiver_up = True
    await drain([relay])
    assert seen == [("rr_0", 0), ("rr_1", 0), ("rr_2", 0), ("rr_0", 1), ("rr_1", 1), ("rr_2", 1)]


async def test_replicas_share_the_outbox_delivering_each_event_once_in_order(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=5, aggregates=20)
    seen: dict[str, list[int]] = defaultdict(list)
    ids: list[str] = []

    async def deliver(event: common_pb2.Event) -> None:
        await asyncio.sleep(random.random() / 1000)
        ids.append(event.event_id)
        seen[event.aggregate_id].append(number(event))

    replicas = [Relay(db, {"nudge": deliver}, batch_size=7) for _ in range(3)]
    await drain(replicas)
    assert len(ids) == len(set(ids)) == 100
    assert all(order == [0, 1, 2, 3, 4] for order in seen.values())


async def test_prune_forgets_old_deliveries_and_keeps_undelivered_rows(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=2, aggregates=1)  # rr_0: n=0 then n=1
    async with db.transaction() as uow:
        await first_delivery(uow.conn, "evt_seen")

    async def deliver_first_only(event: common_pb2.Event) -> None:
        if number(event) == 1:
            raise Refused()

    await Relay(db, {"nudge": deliver_first_only}).drain_once()
    await prune(db, utcnow() + timedelta(seconds=1))
    async with db.engine.connect() as conn:
        left = (await conn.execute(select(OUTBOX.c.payload))).scalars().all()
        seen = (await conn.execute(select(func.count()).select_from(INBOX))).scalar_one()
    assert left == ["1"] and seen == 0


async def test_rows_a_crashed_relay_claimed_are_delivered_within_seconds(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=1, aggregates=3)
    seen: list[str] = []

    async def deliver(event: common_pb2.Event) -> None:
        seen.append(event.aggregate_id)

    crashed = Relay(db, {"nudge": deliver})
    assert len(await crashed._claim()) == 3  # claimed, then the process died: no delivery, no release
    restarted = Relay(db, {"nudge": deliver})
    assert await restarted.drain_once() == 0  # the lease still holds
    deadline = asyncio.get_running_loop().time() + 5
    while not seen and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        await restarted.drain_once()
    assert sorted(seen) == ["rr_0", "rr_1", "rr_2"]


async def test_a_live_relay_keeps_its_claims_through_a_slow_delivery(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("reviewloop.storage.outbox.LEASE", timedelta(seconds=0.3))
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=1, aggregates=2)
    seen: list[tuple[str, str]] = []

    def deliver_as(name: str, delay: float) -> Callable[[common_pb2.Event], Awaitable[None]]:
        async def deliver(event: common_pb2.Event) -> None:
            await asyncio.sleep(delay)
            seen.append((name, event.aggregate_id))

        return deliver

    slow = Relay(db, {"nudge": deliver_as("slow", 0.5)})  # each delivery outlasts the lease
    other = Relay(db, {"nudge": deliver_as("other", 0)})
    draining = asyncio.create_task(slow.drain_once())
    for _ in range(8):  # the other replica keeps polling while the slow one works
        await asyncio.sleep(0.15)
        await other.drain_once()
    assert await draining == 2
    assert seen == [("slow", "rr_0"), ("slow", "rr_1")]  # nothing delivered twice


@pytest.mark.parametrize("refusal", [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION])
async def test_an_event_refused_for_good_is_a_dead_letter_and_frees_its_aggregate(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch, refusal: grpc.StatusCode
) -> None:
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=3, aggregates=2)
    seen: list[tuple[str, int]] = []
    offered: list[tuple[str, int]] = []

    async def deliver(event: common_pb2.Event) -> None:
        offered.append((event.aggregate_id, number(event)))
        if (event.aggregate_id, number(event)) == ("rr_0", 0):
            raise Refused(refusal)  # e.g. a malformed body: retrying it can never succeed
        seen.append((event.aggregate_id, number(event)))

    relay = Relay(db, {"nudge": deliver})
    await drain([relay])
    # The aggregate's later events went on, in order; the refused one was offered once.
    assert [n for a, n in seen if a == "rr_0"] == [1, 2]
    assert [n for a, n in seen if a == "rr_1"] == [0, 1, 2]
    assert await dead_letter_count(db) == 1
    [letter] = await dead_letters(db)
    assert (letter.aggregate_id, letter.destination, letter.type) == ("rr_0", "nudge", "nudge")
    assert refusal.name in letter.reason
    # ... and it is never offered again.
    monkeypatch.setattr("reviewloop.storage.outbox.backoff_s", lambda attempts: 0.0)
    await drain([relay])
    assert offered.count(("rr_0", 0)) == 1
    await prune(db, utcnow() + timedelta(days=1))
    assert await dead_letter_count(db) == 1  # kept for an admin, unlike delivered rows


async def test_a_commit_landing_during_an_empty_pass_is_relayed_without_waiting_for_the_poll(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    delivered = asyncio.Event()

    async def deliver(event: common_pb2.Event) -> None:
        delivered.set()

    relay = Relay(db, {"nudge": deliver}, poll_interval_s=3600)
    claim = relay._claim
    passes = 0

    async def claim_with_a_commit_racing_the_first_pass() -> list[Any]:
        nonlocal passes
        passes += 1
        rows = await claim()
        if passes == 1:  # the pass found nothing, and then a submit commits before it ends
            await write_events(db, per_aggregate=1, aggregates=1)
        return rows

    relay._claim = claim_with_a_commit_racing_the_first_pass  # type: ignore[method-assign]
    relay.start()
    try:
        await asyncio.wait_for(delivered.wait(), 30)  # before the fix: the next poll, an hour away
    finally:
        await relay.stop()


class BatchReceiver:
    """A receiver that takes batches, refusing for good the events named in ``bad``."""

    def __init__(self, bad: frozenset[tuple[str, int]] = frozenset()) -> None:
        self.calls: list[list[tuple[str, int]]] = []
        self.bad = bad

    async def __call__(self, event: common_pb2.Event) -> None:
        await self.many([event])

    async def many(self, events: Sequence[common_pb2.Event]) -> None:
        batch = [(e.aggregate_id, number(e)) for e in events]
        self.calls.append(batch)
        if self.bad & set(batch):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT)


async def test_a_receiver_that_takes_batches_gets_the_heads_in_one_call_in_outbox_order(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=2, aggregates=3)
    receiver = BatchReceiver()
    await drain([Relay(db, {"nudge": receiver})])
    assert receiver.calls == [
        [("rr_0", 0), ("rr_1", 0), ("rr_2", 0)],
        [("rr_0", 1), ("rr_1", 1), ("rr_2", 1)],
    ]


async def test_a_batch_refused_for_one_event_delivers_the_others_and_sets_that_one_aside(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=1, aggregates=3)
    receiver = BatchReceiver(bad=frozenset({("rr_1", 0)}))
    await drain([Relay(db, {"nudge": receiver})])
    assert receiver.calls[1:] == [
        [("rr_0", 0)],
        [("rr_1", 0)],
        [("rr_2", 0)],
    ]  # one at a time after the batch
    [letter] = await dead_letters(db)
    assert letter.aggregate_id == "rr_1"
    async with db.engine.connect() as conn:
        undelivered = (
            await conn.execute(select(func.count()).where(OUTBOX.c.delivered_at.is_(None)))
        ).scalar_one()
    assert undelivered == 1  # only the dead letter


async def test_a_dead_letter_keeps_its_project_and_is_retried_once_or_discarded_for_good(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await open_db(SPEC)
    principal = common_pb2.Principal(project_id="prj_b", org_id="org_1", actor_id="a", actor_kind=1)
    async with db.transaction() as uow:
        # A payload with its own project_id, one whose principal names it, and one naming none.
        uow.emit("nudge", "rr_a", "nudge", NudgeRequested(review_id="rr_a", project_id="prj_a"))
        uow.emit("nudge", "rr_b", "nudge", common_pb2.IngestRequest())
        uow.emit("nudge", "rr_b", "nudge", DiffCommitted(principal=principal))
        uow.emit("nudge", "rr_c", "nudge", Int32Value(value=1))
    fixed = False
    delivered: list[str] = []

    async def deliver(event: common_pb2.Event) -> None:
        if not fixed:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT)
        delivered.append(event.aggregate_id)

    relay = Relay(db, {"nudge": deliver})
    await drain([relay])
    assert {(x.aggregate_id, x.project_id) for x in await dead_letters(db)} == {
        ("rr_a", "prj_a"), ("rr_b", "prj_b"), ("rr_b", ""), ("rr_c", "")
    }  # fmt: skip
    [mine] = await dead_letters(db, project_id="prj_a")
    # Another project's admin cannot touch it.
    assert await retry_dead_letter(db, mine.event_id, "prj_b") is None
    assert await discard_dead_letter(db, mine.event_id, "x", "prj_b") is None

    fixed = True
    assert await retry_dead_letter(db, mine.event_id, "prj_a") == mine
    assert await retry_dead_letter(db, mine.event_id, "prj_a") is None  # once
    [theirs] = await dead_letters(db, project_id="prj_b")
    assert await discard_dead_letter(db, theirs.event_id, "obsolete", "prj_b") == theirs
    await drain([relay])
    assert delivered == ["rr_a"]  # the retried letter, once; the discarded one never
    assert await dead_letter_count(db) == 2
    await prune(db, utcnow() + timedelta(days=1))
    async with db.engine.connect() as conn:
        kept = (await conn.execute(select(func.count()).select_from(OUTBOX))).scalar_one()
    assert kept == 2  # delivered and discarded rows pruned, the two dead letters kept


async def test_a_round_that_delivers_its_heads_is_two_statements_built_once(open_db: OpenDb) -> None:
    """The claim (an UPDATE of the heads, RETURNING them) and the mark, whatever the batch's size; an
    idle poll is one statement. Neither is compiled again after the first round."""
    db = await open_db(SPEC)
    receiver = BatchReceiver()
    relay = Relay(db, {"nudge": receiver})
    for per_aggregate in (1, 2):
        await write_events(db, per_aggregate=per_aggregate, aggregates=3)
        with statements(db) as seen:
            assert await relay.drain_once() == 3
        assert [s.sql.split()[0] for s in seen if not s.sql.startswith(("COMMIT", "ROLLBACK"))] == [
            "UPDATE",
            "UPDATE",
        ], seen
        await drain([relay])
    with statements(db) as seen:
        assert await relay.drain_once() == 0
    assert len([s for s in seen if not s.sql.startswith(("COMMIT", "ROLLBACK"))]) == 1
    assert all(s.cached for s in seen if not s.sql.startswith(("COMMIT", "ROLLBACK"))), seen


async def test_the_relays_index_holds_only_the_rows_still_to_send(open_db: OpenDb) -> None:
    """A claim finds its heads among the undelivered rows: the index it reads holds no delivered row, so
    a week of delivered events (kept for the inbox's dedup window) is not read on every poll. Over every
    row, PostgreSQL read the whole table on each claim (9 ms at 60,000 rows)."""
    db = await open_db(SPEC)
    async with db.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            found = text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_outbox_pending'")
        else:
            found = text("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'ix_outbox_pending'")
        definition = (await conn.execute(found)).scalar_one()
    assert "WHERE (delivered_at IS NULL)" in definition or "WHERE delivered_at IS NULL" in definition


async def test_a_failed_delivery_ends_its_span_in_error_so_an_unsampled_trace_of_it_is_kept(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process that samples no new trace (OTEL_TRACES_SAMPLER=always_off) still records them and keeps
    # the ones that fail (telemetry.KeepErrors): a relay whose receiver is down must be one of those.
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        sampler=sampler(TelemetrySettings.from_env({"OTEL_TRACES_SAMPLER": "always_off"}))
    )
    provider.add_span_processor(KeepErrors(SimpleSpanProcessor(exporter)))
    monkeypatch.setattr("reviewloop.storage.outbox.tracer", provider.get_tracer("relay"))
    db = await open_db(SPEC)
    await write_events(db, per_aggregate=1, aggregates=2)

    async def deliver(event: common_pb2.Event) -> None:
        if event.aggregate_id == "rr_0":
            raise Refused(grpc.StatusCode.INTERNAL)

    await Relay(db, {"nudge": deliver}).drain_once()
    [kept] = exporter.get_finished_spans()  # rr_1's delivery was not sampled and did not fail: dropped
    assert kept.name == "outbox.relay nudge"
    assert kept.attributes is not None and kept.attributes[REVIEW_ID] == "rr_0"
    assert kept.status.status_code is StatusCode.ERROR and "INTERNAL" in (kept.status.description or "")

    # A batch whose receiver is down: the batch's one span, in error.
    exporter.clear()
    await write_events(db, per_aggregate=1, aggregates=3)
    receiver = BatchReceiver()
    receiver.many = _down  # type: ignore[method-assign]
    await Relay(db, {"nudge": receiver}).drain_once()
    [kept] = exporter.get_finished_spans()
    assert kept.name.startswith("outbox.relay batch of")
    assert kept.status.status_code is StatusCode.ERROR and "UNAVAILABLE" in (kept.status.description or "")


async def _down(events: Sequence[common_pb2.Event]) -> None:
    raise Refused(grpc.StatusCode.UNAVAILABLE)
