"""nudge's writes are atomic under cancellation (issue 34): ``Ingest`` (set-based on PostgreSQL, and
event by event) and ``Ack``, cancelled at each round trip of their units (``tests.cancellation``), then
retried: one effect, durable, the retry a replay.

The lost terminal nudges: review_state's relay was killed with an ``Ingest`` in flight, grpc.aio cancelled
the handler during its BEGIN, and the retried batch answered OK inside the zombie transaction that left
on its pooled connection, and was never stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from nudge import app
from nudge.__main__ import SPEC
from reviewloop.common.v1 import common_pb2
from reviewloop.ids import new_id
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.storage.inbox import ingest_each
from sqlalchemy import text

from tests.cancellation import Attempt, count, each_await, observer
from tests.nudge.factory import AGENT, event

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
Ingest = Callable[[Database, list[common_pb2.Event]], Awaitable[tuple[int, int]]]


@pytest.fixture
async def dbs(open_db: OpenDb) -> AsyncIterator[tuple[Database, Database]]:
    db = await open_db(SPEC)
    seen = await observer(db)
    yield db, seen
    await seen.dispose()


async def _each(db: Database, events: list[common_pb2.Event]) -> tuple[int, int]:
    done = await ingest_each(db, events, app.SUBSCRIPTIONS, app.on_commit(db), prepare=app._lock_projects)
    return done.accepted, done.duplicates


async def _stored(seen: Database, review_id: str, events: list[common_pb2.Event]) -> None:
    """The review's two nudges, its terminal one last, each event received once."""
    reasons = await _reasons(seen, review_id)
    assert reasons == ["rejected", "sent"], reasons
    for one in events:
        assert await count(seen, "SELECT count(*) FROM inbox WHERE event_id = :e", e=one.event_id) == 1


async def _reasons(seen: Database, review_id: str) -> list[str]:
    async with seen.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT reason FROM nudges WHERE review_id = :r ORDER BY seq"), {"r": review_id}
        )
        return list(rows.scalars())


@pytest.mark.parametrize("path", ["batch", "each"])
async def test_an_ingest_cancelled_at_any_round_trip_stores_its_batch_once(
    dbs: tuple[Database, Database], path: str
) -> None:
    """A relay's batch of a review's last two nudges (set-based on PostgreSQL; ``ingest_batch`` on
    SQLite), and the same events one unit of work each."""
    db, seen = dbs
    ingest: Ingest = app.ingest if path == "batch" else _each

    async def attempt() -> Attempt[tuple[int, int]]:
        review_id = new_id("rr")
        events = [event(review_id, "rejected"), event(review_id, "sent")]

        async def call() -> tuple[int, int]:
            return await ingest(db, events)

        async def verify(answer: tuple[int, int]) -> None:
            assert sum(answer) == 2, answer
            await _stored(seen, review_id, events)
            assert await call() == (0, 2)  # the relay's next retry: duplicates

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 4


async def test_an_ack_cancelled_at_any_round_trip_moves_the_cursor_once(
    dbs: tuple[Database, Database],
) -> None:
    db, seen = dbs

    async def attempt() -> Attempt[app.Acked]:
        review_id = new_id("rr")
        await app.ingest(db, [event(review_id, "rejected"), event(review_id, "sent")])

        async def call() -> app.Acked:
            return await app.acknowledge(db, AGENT, [(review_id, 2)])

        async def verify(answer: app.Acked) -> None:
            assert answer.taken == 1
            assert await count(seen, "SELECT count(*) FROM unacked WHERE review_id = :r", r=review_id) == 0
            assert await count(seen, "SELECT count(*) FROM nudges WHERE review_id = :r", r=review_id) == 2
            assert (await call()).cursors == {}  # a repeated ack moves nothing

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 1
