"""nudge use cases on SQLite and PostgreSQL: dedupe on event_id, per-review seq, the terminal
guarantee, collapse, payload validation, visibility, acks, paging and compaction."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import orjson
import pytest
import sqlalchemy
from google.protobuf.message import Message
from nudge import app, store
from nudge.__main__ import SPEC
from nudge.bootstrap import NudgeEnvironment
from reviewloop.errors import Code, DomainError
from reviewloop.service import Peers, ServiceSpec
from reviewloop.storage import Database
from reviewloop.storage.codec import as_json_object
from reviewloop.tenancy import ActorKind, Principal

from tests.nudge.factory import AGENT, PAYLOADS, N, changed, envelope, event, foreign, raw
from tests.nudge.factory import body as event_body

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
FOREVER = timedelta(days=3650)


async def reasons(db: Database, principal: Principal = AGENT) -> list[tuple[str, str, int]]:
    events, _ = await app.list_events(db, principal, limit=200, cursor="")
    return [(e.review_id, e.reason, e.seq) for e in events]


async def stored(db: Database, review_id: str) -> list[tuple[str, int]]:
    async with db.engine.connect() as conn:
        return [(r.reason, r.seq) for r in await store.review_log(conn, review_id)]


async def test_terminal_nudge_is_last_and_highest_seq(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(
        db,
        [
            event("rr_a", "rejected"),
            event("rr_a", "cancelled"),
            event("rr_a", "feedback_added"),
            event("rr_a", "sent"),
            event("rr_a", "redraft_requested"),
        ],
    )
    assert await reasons(db) == [("rr_a", "rejected", 1), ("rr_a", "cancelled", 2)]


async def test_send_failed_then_cancelled_is_the_one_pair(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(
        db,
        [
            event("rr_b", "send_failed"),
            event("rr_b", "cancelled"),
            event("rr_b", "cancelled"),
            event("rr_b", "send_failed"),
        ],
    )
    assert await reasons(db) == [("rr_b", "send_failed", 1), ("rr_b", "cancelled", 2)]


async def test_sent_is_never_followed_by_cancelled(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [event("rr_s", "sent"), event("rr_s", "cancelled"), event("rr_s", "send_failed")])
    assert await reasons(db) == [("rr_s", "sent", 1)]


async def test_reserved_reasons_are_refused(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    assert await app.ingest(db, [event("rr_c", "staleness"), event("rr_c", "approved")]) == (2, 0)
    assert await reasons(db) == []


async def test_front_run_next_collapses_per_parent_revision(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    hammer = PAYLOADS["front_run_next"]
    await app.ingest(
        db,
        [
            event("rr_d", "cancelled"),
            *(event("rr_d", "front_run_next", hammer) for _ in range(3)),
            event("rr_d", "front_run_next", changed(hammer, your_parent_revision=2)),
        ],
    )
    assert await reasons(db) == [
        ("rr_d", "cancelled", 1),
        ("rr_d", "front_run_next", 2),
        ("rr_d", "front_run_next", 3),
    ]


async def test_front_run_next_needs_a_terminal_nudge_before_it(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [event("rr_h", "rejected"), event("rr_h", "front_run_next")])
    assert await reasons(db) == [("rr_h", "rejected", 1)]


async def test_redelivery_is_stored_once(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    once = event("rr_e", "rejected")
    assert await app.ingest(db, [once]) == (1, 0)
    assert await app.ingest(db, [once, once]) == (0, 2)
    assert await reasons(db) == [("rr_e", "rejected", 1)]


@pytest.mark.parametrize(
    ("reason", "payload"),
    [
        ("sent", changed(PAYLOADS["sent"], message_id="")),
        ("sent", changed(PAYLOADS["sent"], state="auto_sent")),  # auto_sent is the direct / graduated flavour
        ("sent", changed(PAYLOADS["sent"], thread_ref="")),
        ("sent", changed(PAYLOADS["sent"], sent_at="yesterday")),
        ("sent", changed(PAYLOADS["sent"], drop=("decision",))),
        ("send_failed", changed(PAYLOADS["send_failed"], agent_retryable=True)),
        ("send_failed", changed(PAYLOADS["send_failed"], from_state="sending")),
        ("propagate_general_rule", changed(PAYLOADS["propagate_general_rule"], suggested_batch=0)),
        ("propagate_general_rule", N.PropagateGeneralRule(rule=N.RuleRef(id="rule_1"))),
        ("rejected", foreign("rr_i", "rejected", ["not", "an", "object"])),
    ],
)
async def test_an_invalid_payload_is_refused_but_acknowledged(
    open_db: OpenDb, reason: str, payload: Message | bytes
) -> None:
    db = await open_db(SPEC)
    bad = raw(payload if isinstance(payload, bytes) else event_body("rr_i", reason, payload))
    assert await app.ingest(db, [bad]) == (1, 0)
    assert await app.ingest(db, [bad]) == (0, 1)  # the relay's retry is a duplicate, not a loop
    assert await stored(db, "rr_i") == []


async def test_a_malformed_envelope_never_crashes_ingest(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    envelopes: list[object] = [
        b"{not json",
        [1, 2],
        foreign("rr_j", "exploded"),
        changed(event_body("rr_j", "rejected"), review_id=""),
        changed(event_body("rr_j", "rejected"), agent_id="agt_" + "x" * 60),
        orjson.dumps({**as_json_object(event_body("rr_j", "rejected")), "project_id": 7}),
        envelope("rr_j"),  # no payload, so no reason
    ]
    assert await app.ingest(db, [raw(e) for e in envelopes]) == (len(envelopes), 0)
    assert await app.ingest(db, [raw(event_body("rr_j", "rejected"), type_="review_outcome")]) == (1, 0)
    assert await stored(db, "rr_j") == []
    await app.ingest(db, [event("rr_j", "rejected")])
    assert await reasons(db) == [("rr_j", "rejected", 1)]


async def test_a_review_keeps_the_tenant_of_its_first_nudge(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    other = Principal("org_2", "prj_2", ActorKind.AGENT, "agt_9")
    await app.ingest(db, [event("rr_t", "rejected"), event("rr_t", "feedback_added", principal=other)])
    assert await reasons(db) == [("rr_t", "rejected", 1)]
    assert await reasons(db, other) == []


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


async def test_a_human_of_the_project_sees_every_agents_nudges(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [event("rr_k", "rejected"), event("rr_l", "rejected", agent_id="agt_2")])
    human = Principal("org_1", "prj_1", ActorKind.HUMAN, "key_h")
    assert [r[0] for r in await reasons(db, human)] == ["rr_k", "rr_l"]
    await app.ack(db, human, [("rr_l", 1)])
    assert [r[0] for r in await reasons(db, human)] == ["rr_k"]
    outsider = Principal("org_1", "prj_2", ActorKind.HUMAN, "key_o")
    with pytest.raises(DomainError) as foreign:
        await app.ack(db, outsider, [("rr_k", 1)])
    assert foreign.value.code is Code.NOT_FOUND


async def test_a_failed_ack_in_a_batch_moves_no_cursor(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [event("rr_m", "rejected"), event("rr_n", "rejected")])
    with pytest.raises(DomainError) as refused:
        await app.ack(db, AGENT, [("rr_m", 1), ("rr_n", 2)])
    assert refused.value.code is Code.BAD_REQUEST
    assert [r[0] for r in await reasons(db)] == ["rr_m", "rr_n"]
    with pytest.raises(DomainError) as too_many:
        await app.ack(db, AGENT, [("rr_m", 1)] * 101)
    assert too_many.value.code is Code.BAD_REQUEST


async def test_list_pages_oldest_first_across_reviews(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.ingest(db, [event(f"rr_p{i % 3}", "feedback_added") for i in range(7)])
    seen: list[tuple[str, int]] = []
    cursor = ""
    while True:
        page, cursor = await app.list_events(db, AGENT, limit=3, cursor=cursor)
        seen += [(e.review_id, e.seq) for e in page]
        if not cursor:
            break
    assert seen == [(f"rr_p{i % 3}", i // 3 + 1) for i in range(7)]
    for bad in ("abc", "-4"):
        with pytest.raises(DomainError):
            await app.list_events(db, AGENT, limit=3, cursor=bad)
    with pytest.raises(DomainError):
        await app.list_events(db, AGENT, limit=201, cursor="")


async def test_compaction_drops_only_acked_nudges_and_the_guarantee_survives(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    hammer = PAYLOADS["front_run_next"]
    await app.ingest(
        db,
        [
            event("rr_q", "rejected"),
            event("rr_q", "cancelled"),
            event("rr_q", "front_run_next", hammer),
            event("rr_r", "rejected"),
        ],
    )
    await app.ack(db, AGENT, [("rr_q", 3)])
    assert await app.compact(db, retention=FOREVER, inbox_retention=FOREVER) == 0  # not old enough
    assert await app.compact(db, retention=timedelta(0), inbox_retention=FOREVER) == 3
    assert await stored(db, "rr_q") == []
    assert await reasons(db) == [("rr_r", "rejected", 1)]  # un-acked: never dropped, whatever its age

    # The head outlives its nudges: still terminal, still collapsed, seq continues after the head.
    await app.ingest(
        db,
        [
            event("rr_q", "redraft_requested"),
            event("rr_q", "sent"),
            event("rr_q", "front_run_next", hammer),
            event("rr_q", "front_run_next", changed(hammer, your_parent_revision=4)),
        ],
    )
    assert await reasons(db) == [("rr_r", "rejected", 1), ("rr_q", "front_run_next", 4)]


async def test_the_service_sweep_compacts_acked_nudges(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await open_db(SPEC)
    monkeypatch.setenv("REVIEWLOOP_NUDGE_RETENTION_S", "0")
    monkeypatch.setenv("REVIEWLOOP_NUDGE_COMPACT_EVERY_S", "0.05")
    await app.ingest(db, [event("rr_u", "rejected"), event("rr_v", "rejected")])
    await app.ack(db, AGENT, [("rr_u", 1)])
    assert SPEC.background is not None and SPEC.bootstrap is not None
    jobs = [
        asyncio.create_task(job())
        for job in SPEC.background(SPEC.bootstrap(db, Peers({}), NudgeEnvironment.from_env(os.environ)))
    ]
    try:
        deadline = time.monotonic() + 10
        while await stored(db, "rr_u") and time.monotonic() < deadline:  # noqa: ASYNC110 - the sweep's task
            await asyncio.sleep(0.05)
    finally:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
    assert await stored(db, "rr_u") == []
    assert await stored(db, "rr_v") == [("rejected", 1)]


async def test_a_nudge_in_the_envelope_of_an_older_release_is_stored_as_its_typed_twin(
    open_db: OpenDb,
) -> None:
    # An upgrade finds rows that review_state 0.1.0-pre.6 wrote ({reason, ..., payload}) still in its outbox.
    db = await open_db(SPEC)
    typed = event_body("rr_old", "rejected")
    older = {
        **as_json_object(envelope("rr_old")),
        "reason": "rejected",
        "payload": {"revision": 1, "feedback": "too long", "by": "human"},
    }
    assert await app.ingest(db, [raw(older, aggregate_id="rr_old")]) == (1, 0)
    events, _ = await app.list_events(db, AGENT, limit=10, cursor="")
    assert [(e.reason, orjson.loads(e.payload_json)) for e in events] == [
        ("rejected", as_json_object(typed.rejected))
    ]


async def test_a_relayed_batch_is_stored_in_one_transaction(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    commits = 0

    def count(_conn: object) -> None:
        nonlocal commits
        commits += 1

    sqlalchemy.event.listen(db.engine.sync_engine, "commit", count)
    batch = [event(f"rr_b{i}", "feedback_added") for i in range(20)] + [event("rr_b0", "rejected")]
    assert await app.ingest(db, batch) == (21, 0)
    assert commits == 1  # not one per event
    assert [r for r in await reasons(db) if r[0] == "rr_b0"] == [
        ("rr_b0", "feedback_added", 1),
        ("rr_b0", "rejected", 2),
    ]


async def test_a_batch_that_fails_as_one_stores_each_event_that_can_be(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await open_db(SPEC)
    append = store.append

    async def append_failing_for_one_review(conn: Any, incoming: Any, **kwargs: Any) -> None:
        if incoming.review_id == "rr_bad":
            raise RuntimeError("the store failed this one")
        await append(conn, incoming, **kwargs)

    async def append_many_failing_for_one_review(conn: Any, added: Any, *rest: Any) -> None:
        if any(a.incoming.review_id == "rr_bad" for a in added):
            raise RuntimeError("the store failed this one")
        await append_many(conn, added, *rest)

    append_many = store.append_many
    monkeypatch.setattr(store, "append", append_failing_for_one_review)
    # PostgreSQL stores the batch set-based first; that fails as one too.
    monkeypatch.setattr(store, "append_many", append_many_failing_for_one_review)
    with pytest.raises(RuntimeError):
        await app.ingest(
            db, [event("rr_ok1", "rejected"), event("rr_bad", "rejected"), event("rr_ok2", "sent")]
        )
    # The batch was retried event by event: the first event was stored before the failing one.
    assert await reasons(db) == [("rr_ok1", "rejected", 1)]
