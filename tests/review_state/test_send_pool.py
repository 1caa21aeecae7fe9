"""review_state's side of the shared-pool auto-send governor (issue 35): a direct or graduated release
spends its From domain's pool before its unit of work, and every outcome settles the pool's receipt
through the outbox in the unit that records it (dispatch_budget's side is tests/dispatch_budget/
test_send_pools.py; through the gateway, tests/e2e/test_send_pools.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from review_state import app
from review_state.app import Env
from review_state.domain.decision import Decision
from review_state.domain.submission import Dial
from reviewloop.errors import Code, DomainError

from tests.review_state.conftest import ADMIN, AGENT, DRAFT, REVIEWER, outbox, peers, provider

DIRECT = replace(DRAFT, intent=None)


async def _settled(env: Env) -> list[tuple[str, str]]:
    return [(e["review_id"], e["outcome"]) for e in await outbox(env, "dispatch_budget", "pool_send_settled")]


async def test_each_outcome_of_a_pooled_release_settles_its_receipt_in_its_own_unit(env: Env) -> None:
    await app.set_policy(env, ADMIN, "allow_direct")
    outcomes = {}
    for mode in ("ok", "refuse", "unknown"):
        provider(env).mode = mode
        _, review = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DIRECT, category_id="", idempotency_key="")
        )
        outcomes[mode] = review.id
    assert await _settled(env) == [
        (outcomes["ok"], "POOL_SEND_OUTCOME_SENT"),  # delivered: spent
        (outcomes["refuse"], "POOL_SEND_OUTCOME_NOT_SENT"),  # refused: refunded
        (outcomes["unknown"], "POOL_SEND_OUTCOME_UNKNOWN"),  # parked past DATA: kept
    ]
    provider(env).mode = "ok"
    # A human-reviewed send never spends the pool.
    _, queued = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="")
    )
    assert queued.id not in {r for held in peers(env).pool_receipts.values() for r in held}


async def test_over_the_pool_a_direct_send_is_refused_and_an_auto_send_is_held(env: Env) -> None:
    fake = peers(env)
    fake.pool_budget = 1
    await app.set_policy(env, ADMIN, "allow_direct")
    await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DIRECT, category_id="", idempotency_key="")
    )
    with pytest.raises(DomainError) as caught:
        await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DIRECT, category_id="", idempotency_key="")
        )
    assert caught.value.code is Code.QUOTA_EXCEEDED
    assert dict(caught.value.hints)["send_pool_budget"] == "1/1"
    await app.set_policy(env, ADMIN, "auto_send_graduated")
    fake.category_state = "auto_notify"
    _, held = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", confidence=0.9, idempotency_key=""),
    )
    assert (held.state.value, held.gate_outcome) == ("needs_review", "held:pool_budget")


async def test_a_release_the_daily_cap_holds_gives_its_pool_unit_back_in_the_same_unit(env: Env) -> None:
    await app.set_policy(env, ADMIN, "auto_send_graduated")
    fake = peers(env)
    fake.category_state, fake.dial = "auto_notify", Dial(0.7, False, 0.0, 1)
    kwargs = {"category_id": "cat_1", "confidence": 0.9, "idempotency_key": ""}
    _, sent = await app.submit(env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, **kwargs))  # type: ignore[arg-type]
    _, held = await app.submit(env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, **kwargs))  # type: ignore[arg-type]
    assert (held.state.value, held.gate_outcome) == ("needs_review", "held:daily_cap")
    assert await _settled(env) == [
        (sent.id, "POOL_SEND_OUTCOME_SENT"),
        (held.id, "POOL_SEND_OUTCOME_NOT_SENT"),
    ]


async def test_a_review_agents_release_spends_the_pool_and_a_held_one_spends_it_later(env: Env) -> None:
    fake = peers(env)
    fake.pool_budget = 0
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    held = await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert (held.kind, held.forced_by_breaker) == ("sent_to_human", "pool_budget")
    assert held.review.gate_outcome == "held:pool_budget"
    fake.pool_budget = 1
    current = held.review
    sent = await app.reviewer_decide(
        env, REVIEWER, review.id, Decision("approve", current.revision, current.version)
    )
    assert (sent.kind, sent.review.send_path) == ("sent", "reviewer_approved")
    assert await _settled(env) == [(review.id, "POOL_SEND_OUTCOME_SENT")]
