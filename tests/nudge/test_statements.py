"""The drain's hot paths in as few statements as they need (issue 18), on SQLite and PostgreSQL: what
a statement saved must not change what the caller reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nudge import app
from nudge.__main__ import SPEC
from nudge.server import NudgeServicer
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database

from tests.nudge.factory import AGENT, event
from tests.statements import statements

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def _backlog(db: Database) -> None:
    """rr_a with seqs 1..3, 1 acked; rr_b with seq 1."""
    await app.ingest(db, [event("rr_a", "feedback_added") for _ in range(3)])
    await app.ingest(db, [event("rr_b", "rejected")])
    await app.ack(db, AGENT, [("rr_a", 1)])


async def test_a_wait_answers_the_cursors_of_its_events_from_its_own_read(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _backlog(db)
    servicer = NudgeServicer(app.Env(db))
    request = nudge_pb2.WaitForEventsRequest(principal=AGENT.to_proto(), timeout_s=1, limit=50)
    with statements(db) as seen:
        reply = await servicer.WaitForEvents(request, None)  # type: ignore[arg-type]
    assert [(e.review_id, e.seq) for e in reply.events] == [("rr_a", 2), ("rr_a", 3), ("rr_b", 1)]
    assert {c.review_id: c.last_acked_seq for c in reply.cursors} == {"rr_a": 1, "rr_b": 0}
    assert len(seen) == 1  # the un-acked nudges and broadcasts together; no cursor read
    # A list from a cursor does not start at the front: its cursors are read.
    listed = await servicer.ListEvents(
        nudge_pb2.ListEventsRequest(principal=AGENT.to_proto(), limit=1),
        None,  # type: ignore[arg-type]
    )
    paged = await servicer.ListEvents(
        nudge_pb2.ListEventsRequest(principal=AGENT.to_proto(), limit=5, cursor=listed.next_cursor),
        None,  # type: ignore[arg-type]
    )
    assert [(e.review_id, e.seq) for e in paged.events] == [("rr_a", 3), ("rr_b", 1)]
    assert {c.review_id: c.last_acked_seq for c in paged.cursors} == {"rr_a": 1, "rr_b": 0}
    # A review named with nothing left to read still answers its cursor.
    await app.ack(db, AGENT, [("rr_b", 1)])
    drained = await servicer.ListEvents(
        nudge_pb2.ListEventsRequest(principal=AGENT.to_proto(), review_id="rr_b"),
        None,  # type: ignore[arg-type]
    )
    assert not drained.events
    assert [(c.review_id, c.last_acked_seq) for c in drained.cursors] == [("rr_b", 1)]


async def test_a_relayed_batch_is_two_statements_on_postgresql_and_a_nudge_six_on_sqlite(
    open_db: OpenDb,
) -> None:
    """PostgreSQL stores a batch set-based, whatever its size: its project's lock, the inbox, the heads and
    the webhook endpoints in one statement, the append (the frontier rows, the heads' advance, the
    deliveries and the announcement with it) in the other. SQLite goes event by event: the inbox, the
    head, three statements of append and the endpoints per nudge, and takes no lock."""
    db = await open_db(SPEC)
    await app.ingest(db, [event("rr_a", "feedback_added")])
    with statements(db) as seen:
        assert await app.ingest(db, [event("rr_a", "feedback_added"), event("rr_b", "rejected")]) == (2, 0)
    assert len(seen) == (2 * 6 if db.is_sqlite else 2), seen
    # Each compiled once for every nudge, not again per nudge.
    assert [s.sql for s in seen if not s.cached] == []
    events, _ = await app.list_events(db, AGENT, limit=10, cursor="")
    assert [(e.review_id, e.seq) for e in events] == [("rr_a", 1), ("rr_a", 2), ("rr_b", 1)]


async def test_an_ack_answers_the_cursors_it_moved_from_its_own_statement(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _backlog(db)
    servicer = NudgeServicer(app.Env(db))

    def ack(*acks: tuple[str, int]) -> nudge_pb2.AckRequest:
        return nudge_pb2.AckRequest(
            principal=AGENT.to_proto(), acks=[nudge_pb2.Ack(review_id=r, seq=s) for r, s in acks]
        )

    with statements(db) as seen:
        reply = await servicer.Ack(ack(("rr_a", 3), ("rr_b", 1)), None)  # type: ignore[arg-type]
    assert reply.acked == 2
    assert [(c.review_id, c.last_acked_seq) for c in reply.cursors] == [("rr_a", 3), ("rr_b", 1)]
    assert len(seen) == 1  # the guarded DELETE; no cursor read
    # A repeated (older) ack moves nothing: the cursor as it stands is read.
    again = await servicer.Ack(ack(("rr_a", 2)), None)  # type: ignore[arg-type]
    assert [(c.review_id, c.last_acked_seq) for c in again.cursors] == [("rr_a", 3)]
