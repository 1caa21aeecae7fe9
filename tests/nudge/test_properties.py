"""Property: whatever the interleaving of producer events, duplicate deliveries and acks, the queue
keeps spec 000's promises. Each example runs on its own reviews in its own project of one store."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nudge import app, store
from nudge.__main__ import SPEC
from nudge.domain.reasons import TERMINAL, Reason
from reviewloop.errors import DomainError
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.tenancy import ActorKind, Principal

from tests.nudge.factory import PAYLOADS, changed, event

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
REVIEWS = 3
TERMINAL_SEQUENCES = ([], ["sent"], ["send_failed"], ["cancelled"], ["send_failed", "cancelled"])

emit = st.tuples(
    st.just("emit"),
    st.integers(0, REVIEWS - 1),
    st.sampled_from([r.value for r in Reason]),
    st.integers(1, 2),  # front_run_next's parent_revision
    st.sampled_from(["sent", "cancelled"]),  # front_run_next's terminal state
)
redeliver = st.tuples(st.just("redeliver"), st.integers(0, 1000))
ack = st.tuples(st.just("ack"), st.integers(0, REVIEWS - 1), st.integers(1, 6))
operations = st.lists(st.one_of(emit, emit, redeliver, ack), min_size=1, max_size=30)


@pytest.fixture
async def db(open_db: OpenDb) -> Database:
    """One store for every example of a test; each example brings its own project and reviews."""
    return await open_db(SPEC)


def payload(reason: str, parent_revision: int, state: str) -> Message | None:
    if reason != "front_run_next":
        return None  # the reason's usual payload
    sent_message_id = {"sent_message_id": "msg_1"} if state == "sent" else {}
    return changed(PAYLOADS[reason], state=state, your_parent_revision=parent_revision, **sent_message_id)


def collapse_identity(stored_payload: str) -> str:
    body = orjson.loads(stored_payload)
    return f"{body.get('state')}:{body.get('your_parent_revision')}"


def check_review_log(log: list[tuple[str, int, str]]) -> None:
    """log: (reason, seq, collapse identity) in seq order."""
    assert [seq for _, seq, _ in log] == list(range(1, len(log) + 1)), "seq is gapless per review"
    reasons = [reason for reason, _, _ in log]
    terminals = [r for r in reasons if r in TERMINAL]
    assert terminals in TERMINAL_SEQUENCES, f"one terminal nudge (the failed-send pair aside): {reasons}"
    assert not set(reasons) & {"staleness", "approved"}
    if terminals:
        first = reasons.index(terminals[0])
        assert all(r in ("front_run_next", "cancelled") for r in reasons[first + 1 :]), reasons
        lifecycle = [r for r in reasons if r != "front_run_next"]
        assert lifecycle[-1] == terminals[-1], "the terminal nudge is the last of the lifecycle"
        assert "front_run_next" not in reasons[:first]
    else:
        assert "front_run_next" not in reasons
    keys = Counter(key for reason, _, key in log if reason == "front_run_next")
    assert all(n == 1 for n in keys.values()), "one front_run_next per collapse key"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
async def test_any_interleaving_keeps_the_queue_promises(db: Database, ops: list[tuple[Any, ...]]) -> None:
    run = uuid.uuid4().hex[:12]
    agent = Principal("org_p", f"prj_{run}", ActorKind.AGENT, "agt_p")
    reviews = [f"rr_{run}_{i}" for i in range(REVIEWS)]
    sent: list[Any] = []
    acked = dict.fromkeys(reviews, 0)

    for op in ops:
        if op[0] == "emit":
            _, index, reason, parent_revision, state = op
            sent.append(
                event(reviews[index], reason, payload(reason, parent_revision, state), principal=agent)
            )
            await app.ingest(db, [sent[-1]])
        elif op[0] == "redeliver" and sent:
            assert await app.ingest(db, [sent[op[1] % len(sent)]]) == (0, 1)
        elif op[0] == "ack":
            _, index, seq = op
            try:
                await app.ack(db, agent, [(reviews[index], seq)])
            except DomainError:
                continue  # past the head, or nothing of this review stored yet
            acked[reviews[index]] = max(acked[reviews[index]], seq)
        listed, _ = await app.list_events(db, agent, limit=200, cursor="")
        assert all(e.seq > acked[e.review_id] for e in listed), "nothing acked returns"

    async def snapshot() -> dict[str, list[tuple[str, int, str]]]:
        async with db.engine.connect() as conn:
            logs = {rid: await store.review_log(conn, rid) for rid in reviews}
        return {
            rid: [(r.reason, r.seq, collapse_identity(r.payload)) for r in rows] for rid, rows in logs.items()
        }

    before = await snapshot()
    for log in before.values():
        check_review_log(log)
    listed, _ = await app.list_events(db, agent, limit=200, cursor="")
    expected = sorted((rid, seq) for rid, log in before.items() for _, seq, _ in log if seq > acked[rid])
    assert sorted((e.review_id, e.seq) for e in listed) == expected
    # However the relay retries, nothing changes.
    await app.ingest(db, sent)
    assert await snapshot() == before
