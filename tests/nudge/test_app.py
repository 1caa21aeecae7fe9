"""nudge ingest: dedupe on event_id, per-review seq, the terminal guarantee, collapse, acks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from nudge import app
from nudge.__main__ import SPEC
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.tenancy import ActorKind, Principal

AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_1")
OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


def event(review_id: str, reason: str, payload: dict[str, Any] | None = None, agent_id: str = "agt_1") -> Any:
    body = {
        "reason": reason,
        "review_id": review_id,
        "org_id": "org_1",
        "project_id": "prj_1",
        "agent_id": agent_id,
        "category_id": "",
        "payload": payload or {},
    }
    return common_pb2.Event(
        event_id=new_id("evt"), aggregate_id=review_id, type="nudge", payload=orjson.dumps(body)
    )


async def reasons(db: Database, principal: Principal = AGENT) -> list[tuple[str, str, int]]:
    events, _ = await app.list_events(db, principal, limit=200, cursor="")
    return [(e.review_id, e.reason, e.seq) for e in events]


async def test_terminal_nudge_is_last_and_highest_seq(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(
        db,
        [
            event("rr_a", "rejected"),
            event("rr_a", "cancelled"),
            event("rr_a", "feedback_added"),
            event("rr_a", "sent"),
        ],
    )
    assert await reasons(db) == [("rr_a", "rejected", 1), ("rr_a", "cancelled", 2)]


async def test_send_failed_then_cancelled_is_the_one_pair(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(
        db, [event("rr_b", "send_failed"), event("rr_b", "cancelled"), event("rr_b", "cancelled")]
    )
    assert await reasons(db) == [("rr_b", "send_failed", 1), ("rr_b", "cancelled", 2)]


async def test_reserved_reasons_are_refused(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [event("rr_c", "staleness"), event("rr_c", "approved")])
    assert await reasons(db) == []


async def test_front_run_next_collapses_per_parent_revision(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    hammer = {"state": "cancelled", "your_parent_revision": 1}
    await app.ingest(
        db,
        [
            event("rr_d", "cancelled"),
            *(event("rr_d", "front_run_next", hammer) for _ in range(3)),
            event("rr_d", "front_run_next", {**hammer, "your_parent_revision": 2}),
        ],
    )
    assert [r[1] for r in await reasons(db)] == ["cancelled", "front_run_next", "front_run_next"]


async def test_redelivery_is_stored_once(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    once = event("rr_e", "rejected")
    assert await app.ingest(db, [once]) == (1, 0)
    assert await app.ingest(db, [once, once]) == (0, 2)
    assert await reasons(db) == [("rr_e", "rejected", 1)]


async def test_agents_see_only_their_own_reviews_and_acks_are_monotonic(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(
        db,
        [
            event("rr_f", "rejected"),
            event("rr_f", "feedback_added"),
            event("rr_g", "rejected", agent_id="agt_2"),
        ],
    )
    assert [r[0] for r in await reasons(db)] == ["rr_f", "rr_f"]
    await app.ack(db, AGENT, [("rr_f", 2)])
    await app.ack(db, AGENT, [("rr_f", 1)])  # an older ack never moves the cursor back
    assert await reasons(db) == []
    with pytest.raises(DomainError) as past:
        await app.ack(db, AGENT, [("rr_f", 3)])
    assert past.value.code is Code.BAD_REQUEST
    with pytest.raises(DomainError) as foreign:
        await app.ack(db, AGENT, [("rr_g", 1)])
    assert foreign.value.code is Code.NOT_FOUND
