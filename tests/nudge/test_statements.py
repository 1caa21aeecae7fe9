"""The drain's hot paths in as few statements as they need (issue 18), on SQLite and PostgreSQL: what
a statement saved must not change what the caller reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from nudge import app
from nudge.__main__ import SPEC
from nudge.server import NudgeServicer
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from sqlalchemy import event as sa_event

from tests.nudge.factory import AGENT, event

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


@contextmanager
def statements(db: Database) -> Iterator[list[str]]:
    """The statements ``db`` runs inside the block, as their SQL (SQLite's BEGIN left out)."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if not sql.startswith("BEGIN"):
            seen.append(sql)

    sa_event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa_event.remove(db.engine.sync_engine, "before_cursor_execute", record)


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
