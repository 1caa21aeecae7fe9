"""Backlog pacing under concurrency (hypothesis): the agent restamps nudged drafts and cancels waiting ones
in concurrent batches after a general rule left a category's drafts stale. After every batch, at most the
look-ahead window is in flight and no draft is nudged twice; at the end every draft still pending was
reached exactly once, and none was nudged after it closed."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from review_state import app
from review_state.app import Env, pacing

from tests.review_state.conftest import AGENT, DRAFT, outbox, peers
from tests.review_state.test_ingest import _event, _general_rule

DRAFTS = 7
HIGH_WATER = 9

# A batch: how many of the nudged drafts the agent restamps at once, and which waiting ones it cancels.
batch = st.tuples(st.integers(min_value=1, max_value=4), st.lists(st.integers(0, DRAFTS - 1), max_size=2))


async def _propagated(env: Env) -> list[str]:
    return [e["review_id"] for e in await outbox(env) if e["reason"] == "propagate_general_rule"]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lookahead=st.integers(min_value=1, max_value=3), batches=st.lists(batch, min_size=1, max_size=5))
async def test_concurrent_restamps_and_cancels_keep_the_window_and_reach_every_draft(
    env: Env, lookahead: int, batches: list[tuple[int, list[int]]]
) -> None:
    fake = peers(env)
    fake.pacing = {"lookahead_window": lookahead, "rework_batch_max": 10, "nudge_min_interval_ms": 0}
    fake.token_high_water = HIGH_WATER
    category = f"cat_{id(batches)}_{len(await outbox(env))}"  # hypothesis reuses the store across examples
    ids = []
    for _ in range(DRAFTS):
        _, review = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id=category, idempotency_key="")
        )
        ids.append(review.id)
    before = set(await _propagated(env))
    await app.ingest(env, [_event("rule_changed", _general_rule(HIGH_WATER), f"evt_{category}")])
    reached: set[str] = set()
    cancelled: set[str] = set()

    async def state() -> tuple[list[str], list[str]]:
        """(in flight, nudged so far) of this example's drafts."""
        current = await app.pacing_state(env, AGENT, category)
        flight = [r.id for r, s in current.drafts if s is not None and s.nudged_at is not None]
        nudged = [rid for rid in await _propagated(env) if rid in ids and rid not in before]
        return flight, nudged

    async def restamp(review_id: str) -> None:
        await app.restamp(env, AGENT, app.RestampRequest(review_id, 1, composition_token="tok"))
        reached.add(review_id)

    async def cancel(review_id: str) -> None:
        await app.cancel(env, AGENT, review_id, 1, "")
        cancelled.add(review_id)

    for restamps, cancels in batches:
        flight, _ = await state()
        waiting = [i for i in ids if i not in flight and i not in reached and i not in cancelled]
        work = [restamp(r) for r in flight[:restamps]]
        work += [cancel(r) for r in {waiting[c % len(waiting)] for c in cancels if waiting}]
        await asyncio.gather(*work, return_exceptions=True)  # a lost race is a 409; the state decides
        flight, nudged = await state()
        assert len(flight) <= lookahead
        assert len(nudged) == len(set(nudged))  # never twice
    while True:  # the agent works through the rest
        flight, _ = await state()
        if not flight:
            break
        await asyncio.gather(*(restamp(r) for r in flight))
    assert await pacing.sweep(env) == 0  # nothing was left owed a nudge
    _, nudged = await state()
    assert len(nudged) == len(set(nudged))
    alive = set(ids) - cancelled
    assert alive <= set(nudged)  # every draft still pending was reached
    assert set(nudged) <= set(ids)
    current = await app.pacing_state(env, AGENT, category)
    assert all(s is None for _, s in current.drafts)  # none left stale
    reasons = [(e["reason"], e["review_id"]) for e in await outbox(env)]
    for review_id in cancelled:  # no nudge lands after a review's terminal one
        mine = [reason for reason, rid in reasons if rid == review_id and reason != "front_run_next"]
        assert mine[-1] == "cancelled", mine
