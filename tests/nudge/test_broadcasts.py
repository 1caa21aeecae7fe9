"""Broadcasts in the nudge service on SQLite and PostgreSQL: who sees them, acks per actor, paging mixed
with review nudges (no gap, no repeat), refusal of what is not a broadcast, and compaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from nudge import app
from nudge.__main__ import SPEC
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.rules.v1.events_pb2 import BroadcastRequested, RuleChanged
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.tenancy import ActorKind, Principal

from tests.nudge.factory import AGENT, event, raw

OpenDb = Callable[[ServiceSpec[Any]], Awaitable[Database]]
OTHER_AGENT = Principal(AGENT.org_id, AGENT.project_id, ActorKind.AGENT, "agt_2")
SIBLING_PROJECT = Principal(AGENT.org_id, "prj_2", ActorKind.AGENT, "agt_3")
OTHER_ORG = Principal("org_2", AGENT.project_id, ActorKind.AGENT, AGENT.actor_id)


def rule_broadcast(
    text: str = "Propose a time.", *, project_id: str = "prj_1", agent_id: str = ""
) -> BroadcastRequested:
    return BroadcastRequested(
        org_id="org_1",
        project_id=project_id,
        agent_id=agent_id,
        rule_changed=BroadcastRequested.RuleMoved(
            scope="general", rule=RuleChanged.ChangedRule(id="rule_1", rule_text=text), rule_high_water=3
        ),
    )


def category_broadcast() -> BroadcastRequested:
    return BroadcastRequested(
        org_id="org_1",
        project_id="prj_1",
        category_id="cat_1",
        recheck_category=BroadcastRequested.CategoryMoved(
            category_id="cat_1", state="auto_notify", reason="graduated"
        ),
    )


def broadcast(message: BroadcastRequested) -> common_pb2.Event:
    return raw(message, aggregate_id=message.org_id, type_="broadcast")


async def drained(db: Database, principal: Principal = AGENT) -> list[tuple[str, str, int]]:
    events, _ = await app.list_events(db, principal, limit=200, cursor="")
    return [(e.review_id, e.reason, e.seq) for e in events]


async def test_a_broadcast_reaches_the_agents_it_names_and_no_one_else(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(
        db,
        [
            broadcast(rule_broadcast("project-wide")),
            broadcast(rule_broadcast("org-wide", project_id="")),
            broadcast(rule_broadcast("only agt_2", agent_id="agt_2")),
            broadcast(category_broadcast()),
        ],
    )
    texts = {}
    for principal in (AGENT, OTHER_AGENT, SIBLING_PROJECT, OTHER_ORG):
        events, _ = await app.list_events(db, principal, limit=200, cursor="")
        assert {(e.seq, e.review_id) for e in events} <= {(0, "")}
        texts[principal.actor_id, principal.project_id, principal.org_id] = [
            e.payload["rule"]["rule_text"] if e.reason == "rule_changed" else e.payload["state"]
            for e in events
        ]
    assert texts == {
        ("agt_1", "prj_1", "org_1"): ["project-wide", "org-wide", "auto_notify"],
        ("agt_2", "prj_1", "org_1"): ["project-wide", "org-wide", "only agt_2", "auto_notify"],
        ("agt_3", "prj_2", "org_1"): ["org-wide"],
        ("agt_1", "prj_1", "org_2"): [],
    }


async def test_an_ack_hides_a_broadcast_from_the_acker_only_and_is_idempotent(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [broadcast(rule_broadcast())])
    (seen,), _ = await app.list_events(db, AGENT, limit=10, cursor="")
    assert await app.ack(db, AGENT, [], [seen.id]) == 1
    assert await app.ack(db, AGENT, [], [seen.id]) == 1
    assert await drained(db) == []
    assert await drained(db, OTHER_AGENT) == [("", "rule_changed", 0)]
    with pytest.raises(DomainError) as refused:
        await app.ack(db, OTHER_ORG, [], [seen.id])
    assert refused.value.code is Code.NOT_FOUND


async def test_an_ack_of_a_broadcast_and_a_refused_review_ack_takes_neither(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [broadcast(rule_broadcast()), event("rr_a", "rejected")])
    with pytest.raises(DomainError) as refused:
        await app.ack(
            db, AGENT, [("rr_a", 2)], [(await app.list_events(db, AGENT, limit=1, cursor=""))[0][0].id]
        )
    assert refused.value.code is Code.BAD_REQUEST
    assert sorted(await drained(db)) == [("", "rule_changed", 0), ("rr_a", "rejected", 1)]


async def test_paging_through_nudges_and_broadcasts_has_no_gap_and_no_repeat(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    for i in range(5):
        await app.ingest(db, [event(f"rr_{i}", "rejected"), broadcast(rule_broadcast(f"rule {i}"))])
    seen, cursor = [], ""
    while True:
        page, cursor = await app.list_events(db, AGENT, limit=3, cursor=cursor)
        seen += [e.id for e in page]
        if not cursor:
            break
    everything, _ = await app.list_events(db, AGENT, limit=200, cursor="")
    assert seen == [e.id for e in everything] and len(seen) == 10
    # A stream resumes after any event it handed out, broadcasts included.
    stream = app.subscribe(db, AGENT, cursor="")
    resumed = [await anext(stream) for _ in range(4)][-1][1]
    rest, _ = await app.list_events(db, AGENT, limit=200, cursor=resumed)
    assert [e.id for e in rest] == seen[4:]


async def test_what_is_not_a_broadcast_is_refused_and_never_stored(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    no_payload = BroadcastRequested(org_id="org_1", project_id="prj_1")
    no_org = rule_broadcast()
    no_org.org_id = ""
    assert await app.ingest(db, [broadcast(no_payload), broadcast(no_org)]) == (2, 0)
    assert await drained(db) == []


async def test_old_broadcasts_are_compacted_whoever_acked_them(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [broadcast(rule_broadcast())])
    await app.compact(db, retention=timedelta(days=1), inbox_retention=timedelta(days=1))
    assert await drained(db) == [("", "rule_changed", 0)]
    await app.compact(db, retention=timedelta(seconds=-1), inbox_retention=timedelta(days=1))
    assert await drained(db) == []
