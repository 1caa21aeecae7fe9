"""wait_for_review_event and Subscribe: woken by a publish on another connection (PostgreSQL
LISTEN/NOTIFY, SQLite's in-process signal), bounded, and scoped to what the caller may see."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from nudge import app, wakeup
from nudge.__main__ import SPEC
from reviewloop.errors import Code, DomainError
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, make_engine
from sqlalchemy import text

from tests.nudge.factory import AGENT, event

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
# The waiter's safety-net recheck, pushed past every bound below: a waiter that answers within those
# bounds was woken by the publish, however loaded the machine (speed itself is `make bench`'s job).
RECHECK_S = 60.0
WOKEN_WITHIN_S = 10.0


@pytest.fixture(autouse=True)
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "RECHECK_S", RECHECK_S)


@pytest.fixture
async def replicas(open_db: OpenDb) -> AsyncIterator[tuple[Database, Database]]:
    """(waiter, publisher): on PostgreSQL two engines on one store, as two replicas would have, with
    the waiter's listener running; on SQLite (one process by design) one store."""
    db = await open_db(SPEC)
    if db.is_sqlite:
        yield db, db
        return
    other = Database(make_engine(db.engine.url.render_as_string(hide_password=False)))
    listener = asyncio.create_task(wakeup.listen(db))
    await asyncio.wait_for(wakeup.doorbell(db).listening.wait(), 10)
    try:
        yield db, other
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        await other.dispose()


async def timed_wait(db: Database, timeout_s: float) -> tuple[list[app.Nudge], float]:
    """The waiter's answer and the moment it had it."""
    events = await app.wait_for_events(db, AGENT, timeout_s=timeout_s, limit=50)
    return events, time.monotonic()


async def until_waiting(db: Database, project_id: str) -> None:
    while not wakeup.doorbell(db).waiting(project_id):  # noqa: ASYNC110 - another task parks the waiter
        await asyncio.sleep(0.005)


async def test_wait_is_woken_by_a_publish_on_another_connection(
    replicas: tuple[Database, Database],
) -> None:
    waiter_db, publisher = replicas
    for round_ in range(3):
        waiting = asyncio.create_task(timed_wait(waiter_db, 30))
        await until_waiting(waiter_db, AGENT.project_id)
        await asyncio.sleep(0.05)  # the waiter is parked on the doorbell, not mid-read
        await app.ingest(publisher, [event(f"rr_w{round_}", "rejected")])
        published = time.monotonic()  # committed
        events, woke = await waiting
        assert [(e.review_id, e.reason) for e in events] == [(f"rr_w{round_}", "rejected")]
        assert woke - published < WOKEN_WITHIN_S, f"woke {woke - published:.1f} s after the publish"
        await app.ack(waiter_db, AGENT, [(f"rr_w{round_}", 1)])


async def test_wait_times_out_cleanly_with_no_events(replicas: tuple[Database, Database]) -> None:
    waiter_db, _ = replicas
    started = time.monotonic()
    assert await app.wait_for_events(waiter_db, AGENT, timeout_s=1, limit=50) == []
    assert 0.95 <= time.monotonic() - started < WOKEN_WITHIN_S
    assert not wakeup.doorbell(waiter_db).waiting(AGENT.project_id)


async def test_wait_answers_at_once_when_nudges_are_already_waiting(
    replicas: tuple[Database, Database],
) -> None:
    waiter_db, publisher = replicas
    await app.ingest(publisher, [event("rr_now", "feedback_added")])
    started = time.monotonic()
    events = await app.wait_for_events(waiter_db, AGENT, timeout_s=30, limit=50)
    assert [e.review_id for e in events] == ["rr_now"]
    assert time.monotonic() - started < WOKEN_WITHIN_S


async def test_wait_ignores_nudges_the_caller_cannot_see(replicas: tuple[Database, Database]) -> None:
    waiter_db, publisher = replicas
    waiting = asyncio.create_task(app.wait_for_events(waiter_db, AGENT, timeout_s=10, limit=50))
    await until_waiting(waiter_db, AGENT.project_id)
    await app.ingest(publisher, [event("rr_theirs", "rejected", agent_id="agt_other")])
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await app.ingest(publisher, [event("rr_mine", "rejected")])
    assert [e.review_id for e in await asyncio.wait_for(waiting, 5)] == ["rr_mine"]


@pytest.mark.parametrize("timeout_s", [0, 0.5, 60.5, 3600])
async def test_wait_refuses_an_unbounded_timeout(open_db: OpenDb, timeout_s: float) -> None:
    db = await open_db(SPEC)
    with pytest.raises(DomainError) as refused:
        await app.wait_for_events(db, AGENT, timeout_s=timeout_s, limit=50)
    assert refused.value.code is Code.BAD_REQUEST


async def test_subscribe_streams_the_backlog_then_each_new_nudge(replicas: tuple[Database, Database]) -> None:
    waiter_db, publisher = replicas
    await app.ingest(publisher, [event("rr_s1", "rejected"), event("rr_s1", "feedback_added")])
    stream = app.subscribe(waiter_db, AGENT, cursor="")
    first, cursor = await anext(stream)
    assert (first.review_id, first.seq) == ("rr_s1", 1)
    second, _ = await anext(stream)
    assert (second.review_id, second.seq) == ("rr_s1", 2)
    pending = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.05)
    await app.ingest(publisher, [event("rr_s2", "cancelled")])
    third, _ = await asyncio.wait_for(pending, 2)
    assert (third.review_id, third.reason) == ("rr_s2", "cancelled")
    await stream.aclose()

    # Resuming after the first nudge replays what followed it; an acked nudge never returns.
    await app.ack(waiter_db, AGENT, [("rr_s2", 1)])
    resumed = app.subscribe(waiter_db, AGENT, cursor=cursor)
    again, _ = await anext(resumed)
    assert (again.review_id, again.seq) == ("rr_s1", 2)
    await resumed.aclose()


async def test_the_listener_reconnects_after_losing_its_connection(
    replicas: tuple[Database, Database],
) -> None:
    waiter_db, publisher = replicas
    if waiter_db.is_sqlite:
        pytest.skip("SQLite wakes in-process; there is no listener connection to lose")
    bell = wakeup.doorbell(waiter_db)
    waiting = asyncio.create_task(timed_wait(waiter_db, 30))
    await until_waiting(waiter_db, AGENT.project_id)
    async with publisher.engine.connect() as conn:
        killed = await conn.scalar(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            )
        )
    assert killed == 1
    while bell.listening.is_set():  # noqa: ASYNC110 - the listener task notices the loss
        await asyncio.sleep(0.01)
    await asyncio.wait_for(bell.listening.wait(), 10)
    await app.ingest(publisher, [event("rr_after_reconnect", "rejected")])
    published = time.monotonic()
    events, woke = await asyncio.wait_for(waiting, 30)
    assert [e.review_id for e in events] == ["rr_after_reconnect"]
    assert woke - published < WOKEN_WITHIN_S
