"""A relay's batch stored set-based (PostgreSQL, issue 18) stores exactly what the per-event path
stores: seqs, refusals, collapses, the terminal guarantee, dedupe, frontier, heads and webhook
deliveries; and it costs a handful of statements whatever its size."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from nudge import app, store
from nudge.__main__ import SPEC
from reviewloop.common.v1 import common_pb2
from reviewloop.review.v1.events_pb2 import HumansNotified
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.storage.inbox import ingest_each
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import select

from tests.nudge.factory import AGENT, event, raw
from tests.nudge.test_broadcasts import broadcast, category_broadcast
from tests.statements import statements

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
OTHER = Principal("org_1", "prj_2", ActorKind.AGENT, "agt_9")


def nudge_batch() -> list[common_pb2.Event]:
    """Several reviews and projects, a repeated event id, a terminal nudge and what may and may not
    follow it, a collapsed retry, a tenant mismatch, an unreadable and a reserved event."""
    twice = event("rr_a", "feedback_added")
    return [
        event("rr_a", "rejected"),
        twice,
        event("rr_b", "redraft_requested", principal=OTHER),
        event("rr_c", "send_failed"),
        twice,
        event("rr_c", "cancelled"),
        event("rr_c", "feedback_added"),  # after the terminal pair: refused
        event("rr_c", "front_run_next"),
        event("rr_c", "front_run_next"),  # the same retry: collapsed
        event("rr_d", "front_run_next"),  # before any terminal nudge: refused
        event("rr_a", "rule_changed", principal=OTHER),  # another tenant than rr_a's: refused
        event("rr_a", "approved"),  # reserved: unreadable
        raw(b"{not json", aggregate_id="rr_a"),
        event("rr_b", "sent", principal=OTHER),
        event("rr_a", "sent"),
    ]


def mixed_batch() -> list[common_pb2.Event]:
    """A relay's mixed batch: nudges with a broadcast and a humans_notified among them."""
    notified = HumansNotified(
        org_id="org_1", project_id="prj_1", review_id="rr_e", turn_id="turn_1", agent_id="agt_1"
    )
    return [
        event("rr_e", "rejected"),
        broadcast(category_broadcast()),
        raw(notified, aggregate_id="rr_e", type_="humans_notified"),
        event("rr_e", "cancelled"),
    ]


async def stored(db: Database) -> dict[str, Any]:
    """What a batch leaves behind, without the ids and clocks each store draws itself."""
    async with db.engine.connect() as conn:
        nudges = (
            await conn.execute(
                select(
                    store.nudges.c.review_id,
                    store.nudges.c.seq,
                    store.nudges.c.reason,
                    store.nudges.c.payload,
                ).order_by(store.nudges.c.pos)
            )
        ).all()
        frontier = (
            await conn.execute(
                select(store.unacked.c.review_id, store.unacked.c.seq, store.unacked.c.project_id).order_by(
                    store.unacked.c.pos
                )
            )
        ).all()
        heads = (
            await conn.execute(select(store.review_heads).order_by(store.review_heads.c.review_id))
        ).all()
        keys = (
            await conn.execute(select(store.collapse_keys).order_by(store.collapse_keys.c.collapse_key))
        ).all()
        deliveries = (
            await conn.execute(
                select(store.webhook_deliveries.c.reason, store.webhook_deliveries.c.review_id).order_by(
                    store.webhook_deliveries.c.pos
                )
            )
        ).all()
        broadcasts = (await conn.execute(select(store.broadcasts.c.reason))).all()
    return {
        "nudges": [tuple(r) for r in nudges],
        "frontier": [tuple(r) for r in frontier],
        "heads": [(r.review_id, r.project_id, r.last_seq, list(r.terminal_reasons)) for r in heads],
        "collapse_keys": [tuple(r) for r in keys],
        "deliveries": [tuple(r) for r in deliveries],
        "broadcasts": [tuple(r) for r in broadcasts],
    }


async def with_endpoint(db: Database) -> Database:
    async with db.transaction() as uow:
        endpoint = store.Endpoint(
            "whk_1", "org_1", "prj_1", "https://example.test/hook", [], datetime.now(UTC)
        )
        await store.add_endpoint(uow.conn, endpoint)
    return db


async def test_a_batch_stores_exactly_what_the_per_event_path_stores(open_db: OpenDb) -> None:
    batched, each = await with_endpoint(await open_db(SPEC)), await with_endpoint(await open_db(SPEC))
    for make in (nudge_batch, mixed_batch):
        batch = make()
        # One event of the batch arrived before: a redelivery.
        assert await app.ingest(batched, batch[:1]) == (1, 0)
        done = await ingest_each(each, batch[:1], app.SUBSCRIPTIONS, prepare=app._lock_projects)
        assert (done.accepted, done.duplicates) == (1, 0)
        expected = await ingest_each(each, batch, app.SUBSCRIPTIONS, prepare=app._lock_projects)
        assert await app.ingest(batched, batch) == (expected.accepted, expected.duplicates)
    assert await stored(batched) == await stored(each)
    seqs = [(n[0], n[1], n[2]) for n in (await stored(batched))["nudges"]]
    assert seqs == [
        ("rr_a", 1, "rejected"),
        ("rr_a", 2, "feedback_added"),
        ("rr_b", 1, "redraft_requested"),
        ("rr_c", 1, "send_failed"),
        ("rr_c", 2, "cancelled"),
        ("rr_c", 3, "front_run_next"),
        ("rr_b", 2, "sent"),
        ("rr_a", 3, "sent"),
        ("rr_e", 1, "rejected"),
        ("rr_e", 2, "cancelled"),
    ]
    # The agent sees its nudges, and a later nudge after a terminal one is still refused.
    assert await app.ingest(batched, [event("rr_a", "feedback_added")]) == (1, 0)
    assert [(e.review_id, e.seq) for e in (await app.list_events(batched, AGENT, limit=50, cursor=""))[0]][
        :3
    ] == [
        ("rr_a", 1),
        ("rr_a", 2),
        ("rr_c", 1),
    ]
    assert (await stored(batched))["nudges"] == (await stored(each))["nudges"]


async def test_a_relay_batch_of_many_reviews_is_a_handful_of_statements_on_postgresql(
    open_db: OpenDb,
) -> None:
    """The locks, the inbox, the heads and the endpoints in one statement, the nudges with their frontier,
    heads, deliveries and announcements in the other: two statements for 100 nudges of 100 reviews of one
    project, as for one."""
    db = await open_db(SPEC)
    if db.is_sqlite:
        return  # SQLite stores event by event
    batch = [event(f"rr_{i:03d}", "rejected") for i in range(100)]
    with statements(db) as seen:
        assert await app.ingest(db, batch) == (100, 0)
    assert len(seen) == 2, [s.sql for s in seen]
    events, _ = await app.list_events(db, AGENT, limit=200, cursor="")
    assert [(e.review_id, e.seq) for e in events] == [(f"rr_{i:03d}", 1) for i in range(100)]


async def test_a_relay_batch_across_many_projects_is_still_two_statements_on_postgresql(
    open_db: OpenDb,
) -> None:
    """The batch takes every project's append lock and reads every project's webhook endpoints in its
    first statement and queues every delivery in its second, so a relay batch of 16 agents' projects
    costs what one project's does; each project's endpoint still gets only its own project's deliveries."""
    db = await open_db(SPEC)
    if db.is_sqlite:
        return  # SQLite stores event by event
    agents = [Principal("org_1", f"prj_{i:02d}", ActorKind.AGENT, f"agt_{i:02d}") for i in range(16)]
    async with db.transaction() as uow:
        endpoint = store.Endpoint(
            "whk_3", "org_1", "prj_03", "https://hooks.test/3", ["rejected"], datetime.now(UTC)
        )
        await store.add_endpoint(uow.conn, endpoint)
    batch = [event(f"rr_{i:02d}", "rejected", principal=agent) for i, agent in enumerate(agents)]
    with statements(db) as seen:
        assert await app.ingest(db, batch) == (16, 0)
    assert len(seen) == 2, [s.sql for s in seen]
    async with db.engine.connect() as conn:
        deliveries = (await conn.execute(select(store.webhook_deliveries.c.review_id))).scalars().all()
    assert deliveries == ["rr_03"]
    for i, agent in enumerate(agents):
        events, _ = await app.list_events(db, agent, limit=10, cursor="")
        assert [(e.review_id, e.seq) for e in events] == [(f"rr_{i:02d}", 1)]
