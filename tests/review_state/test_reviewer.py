"""The BYO review-agent plane: decisions, result shapes, and the circuit breakers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from review_state import app, store
from review_state.app import Decision, Env, Revision, _kernel
from review_state.domain.pacing import StaleDraft
from review_state.domain.review import Review
from review_state.domain.submission import Dial
from review_state.store import pacing as paced
from reviewloop.errors import Code, DomainError
from sqlalchemy import select

from tests.review_state.conftest import (
    ADMIN,
    AGENT,
    DRAFT,
    HUMAN,
    REVIEWER,
    opened,
    peers,
    queued,
    reasons,
)
from tests.statements import statements


async def _confident(env: Env) -> Review:
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    return review


async def test_a_reviewer_edit_is_relayed_and_reports_sent(env: Env) -> None:
    review = await _confident(env)
    result = await app.reviewer_decide(
        env,
        REVIEWER,
        review.id,
        Decision("edit", 1, 1, subject="Q3 pilot: quick question", body="Thursday 2pm?"),
    )
    assert (result.kind, result.forced_by_breaker) == ("sent", "")
    assert (result.review.state.value, result.review.revision, result.review.send_path) == (
        "sent",
        2,
        "reviewer_approved",
    )
    assert (await reasons(env, review.id))[-1] == "sent"


@pytest.mark.parametrize(
    ("dial", "confidence", "cap", "breaker"),
    [
        (Dial(0.95, False, 0.0, 200), 0.9, 10, "low_confidence"),
        (Dial(0.5, True, 0.0, 200), 0.9, 10, "first_contact"),
        (Dial(0.5, False, 1.0, 200), 0.9, 10, "canary"),
        (Dial(0.5, False, 0.0, 200), 0.9, 0, "daily_cap"),  # cat_1: the cap is per category
    ],
)
async def test_a_breaker_returns_the_draft_to_the_human_queue_and_names_itself(
    env: Env, dial: Dial, confidence: float, cap: int, breaker: str
) -> None:
    fake = peers(env)
    fake.dial = Dial(dial.min_confidence, dial.first_contact_gate, dial.canary_rate, cap)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(
            kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=confidence
        ),
    )
    result = await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert (result.kind, result.forced_by_breaker) == ("sent_to_human", breaker)
    assert (result.review.state.value, result.review.gate_outcome) == ("needs_review", f"held:{breaker}")
    assert await reasons(env, review.id) == ["redraft_requested"]
    # The human queue still has it: a human can open and decide.
    opened = await app.open_review(env, HUMAN, review.id, result.review.revision, result.review.version)
    assert opened.state.value == "in_review"


async def test_reviewer_reject_and_escalate_return_the_draft_for_a_redraft(env: Env) -> None:
    review = await _confident(env)
    result = await app.reviewer_decide(
        env, REVIEWER, review.id, Decision("reject", 1, 1, feedback="too long")
    )
    assert (result.kind, result.review.state.value, result.review.revision) == (
        "sent_to_human",
        "needs_review",
        2,
    )
    assert await reasons(env, review.id) == ["redraft_requested"]


async def test_the_human_always_wins_a_reviewer_holding_an_old_version_is_stale(env: Env) -> None:
    review = await _confident(env)
    opened = await app.open_review(env, HUMAN, review.id, 1, 1)
    with pytest.raises(DomainError) as caught:
        await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert caught.value.code is Code.STALE and caught.value.version == opened.version


async def test_each_round_is_admitted_and_a_spent_budget_forces_the_human(env: Env) -> None:
    fake = peers(env)
    review = await _confident(env)
    for _ in range(fake.round_limit):
        current, _ = await app.get_review(env, HUMAN, review.id)
        await app.reviewer_decide(
            env, REVIEWER, review.id, Decision("escalate", current.revision, current.version)
        )
    assert [r[2] for r in fake.rounds.values()] == ["issues"] * fake.round_limit
    current, _ = await app.get_review(env, HUMAN, review.id)
    result = await app.reviewer_decide(
        env, REVIEWER, review.id, Decision("approve", current.revision, current.version)
    )
    assert (result.kind, result.forced_by_breaker) == ("sent_to_human", "max_hops_reached")
    assert result.review.gate_outcome == "held:max_hops_reached"
    assert len(fake.rounds) == fake.round_limit  # the refused round spent nothing


async def test_rounds_refused_by_the_no_verdict_cap_say_so(env: Env) -> None:
    fake = peers(env)
    review = await _confident(env)
    await app.reviewer_decide(env, REVIEWER, review.id, Decision("escalate", 1, 1))  # later rounds re-review
    await app.submit_revision(env, AGENT, app.SubmitRevisionRequest(review.id, 2, Revision(body_text="v3")))
    for _ in range(fake.no_verdict_limit):  # each round is overtaken by a redraft after admission
        current, _ = await app.get_review(env, HUMAN, review.id)
        fake.on_admit = lambda rev=current.revision: app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, rev, Revision(body_text=f"v{rev + 1}"))
        )
        with pytest.raises(DomainError) as stale:
            await app.reviewer_decide(
                env, REVIEWER, review.id, Decision("approve", current.revision, current.version)
            )
        assert stale.value.code is Code.STALE
    fake.on_admit = None
    current, _ = await app.get_review(env, HUMAN, review.id)
    result = await app.reviewer_decide(
        env, REVIEWER, review.id, Decision("approve", current.revision, current.version)
    )
    assert (result.kind, result.forced_by_breaker) == ("sent_to_human", "no_verdict_cap_reached")
    assert result.review.gate_outcome == "held:no_verdict_cap_reached"


async def test_a_stale_reviewer_spends_no_round_and_a_budget_outage_writes_nothing(env: Env) -> None:
    fake = peers(env)
    review = await _confident(env)
    fake.down = True
    with pytest.raises(DomainError) as down:
        await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert down.value.code is Code.UNAVAILABLE
    fake.down = False
    unchanged, _ = await app.get_review(env, HUMAN, review.id)
    assert (unchanged.state.value, unchanged.version) == ("needs_review", review.version)
    await app.open_review(env, HUMAN, review.id, 1, 1)
    with pytest.raises(DomainError) as stale:
        await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert stale.value.code is Code.STALE
    assert fake.rounds == {}  # refused by the CAS before admission: no round spent


async def test_a_round_overtaken_after_admission_ends_without_a_verdict(env: Env) -> None:
    fake = peers(env)
    review = await _confident(env)
    fake.on_admit = lambda: app.open_review(env, HUMAN, review.id, 1, 1)
    with pytest.raises(DomainError) as stale:
        await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert stale.value.code is Code.STALE
    # The round is settled as no-verdict, so it is given back to the budget.
    assert [r[2] for r in fake.rounds.values()] == ["superseded"]


async def test_a_decision_retried_after_an_outage_reattaches_to_its_round(env: Env) -> None:
    fake = peers(env)
    review = await _confident(env)
    fake.diff_down = True
    edit = Decision("edit", 1, 1, body="Thursday 2pm?")
    with pytest.raises(DomainError) as down:
        await app.reviewer_decide(env, REVIEWER, review.id, edit)
    assert down.value.code is Code.UNAVAILABLE
    assert [r[2] for r in fake.rounds.values()] == [""]  # admitted, left open for the retry
    fake.diff_down = False
    result = await app.reviewer_decide(env, REVIEWER, review.id, edit)
    assert result.kind == "sent"
    assert [r[2] for r in fake.rounds.values()] == ["issues"]  # the same round, settled once


async def test_only_a_human_attaches_a_rule_and_only_keys_of_the_plane_decide(env: Env) -> None:
    review = await queued(env)
    with pytest.raises(DomainError) as rule:
        await app.reviewer_decide(
            env, REVIEWER, review.id, Decision("approve", 1, 1, new_rule={"rule_text": "x"})
        )
    assert rule.value.code is Code.BAD_REQUEST
    for principal, call in ((AGENT, app.decide), (HUMAN, app.reviewer_decide), (ADMIN, app.reviewer_decide)):
        with pytest.raises(DomainError) as caught:
            await call(env, principal, review.id, Decision("approve", 1, 1))  # type: ignore[operator]
        assert caught.value.code is Code.FORBIDDEN_SCOPE


async def test_an_approval_reads_the_review_once_before_its_compare_and_set(env: Env) -> None:
    review = await opened(env)
    with statements(env.db) as seen:
        sent = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert sent.state.value == "sent"
    reads = [s.sql for s in seen if s.sql.startswith("SELECT reviews.")]
    assert len(reads) == 2, reads  # the precheck, then the delivery's close (the review with its turns)


async def test_an_open_is_one_read_then_one_write_and_a_lost_race_writes_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a keyed open's compare-and-set, turn and key are one statement after its read
    (SQLite writes them one by one); a writer that moves the review in between makes it a 409 stale that
    leaves no turn or key of its own."""
    review = await queued(env)
    with statements(env.db) as seen:
        await app.open_review(env, HUMAN, review.id, 1, review.version, idempotency_key="o1")
    writes = [s.sql for s in seen if not s.sql.startswith("SELECT")]
    parts = ("UPDATE reviews", "INSERT INTO turns", "INSERT INTO idempotency_keys")
    if env.db.is_sqlite:
        assert [w.split(" (")[0].split(" SET")[0] for w in writes] == list(parts), writes
    else:
        assert len(writes) == 1 and all(part in writes[0] for part in parts), writes
    _, turns = await app.get_review(env, HUMAN, review.id)
    assert [(t.seq, t.turn_type, t.revision) for t in turns] == [(1, "opened", 1)]

    raced = await queued(env)
    precheck = _kernel.precheck

    async def then_another_writer(*args: Any, **kwargs: Any) -> Any:
        checked = await precheck(*args, **kwargs)
        monkeypatch.setattr(_kernel, "precheck", precheck)
        await app.open_review(env, HUMAN, raced.id, 1, raced.version)
        return checked

    monkeypatch.setattr(_kernel, "precheck", then_another_writer)
    with pytest.raises(DomainError) as stale:
        await app.open_review(env, HUMAN, raced.id, 1, raced.version, idempotency_key="o2")
    assert stale.value.code is Code.STALE and stale.value.version == raced.version + 1
    _, turns = await app.get_review(env, HUMAN, raced.id)
    assert [t.turn_type for t in turns] == ["opened"]  # the other writer's only
    async with env.db.engine.connect() as conn:
        keys = (await conn.execute(select(store.idempotency_keys.c.key))).scalars().all()
    assert sorted(keys) == ["o1"]


async def test_a_decision_on_a_review_moved_since_its_precheck_is_stale_and_writes_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    review = await opened(env)
    precheck = _kernel.precheck

    async def then_another_writer(*args: Any, **kwargs: Any) -> Review:
        checked = await precheck(*args, **kwargs)
        monkeypatch.setattr(_kernel, "precheck", precheck)
        await app.decide(env, HUMAN, review.id, Decision("escalate", review.revision, review.version))
        return checked

    monkeypatch.setattr(_kernel, "precheck", then_another_writer)
    with pytest.raises(DomainError) as stale:
        await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert stale.value.code is Code.STALE
    now, _ = await app.get_review(env, HUMAN, review.id)
    assert now.state.value != "sent" and now.send_path is None


async def test_an_approval_checks_the_stale_draft_row_in_its_read_and_its_cas_and_a_held_draft_keeps_it(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draft not held stale: its precheck's read says so and its compare-and-set checks it still is not,
    no statement of its own. A held draft's 409 born_stale leaves it held, whether it was held before
    the read or between the read and the write."""
    review = await opened(env)
    with statements(env.db) as seen:
        sent = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert sent.state.value == "sent"
    touched = [s.sql for s in seen if "stale_drafts" in s.sql]
    assert len(touched) == 2 and touched[0].startswith("SELECT reviews.") and "UPDATE reviews" in touched[1]

    held = await opened(env)
    stale = StaleDraft(
        held.id, held.project_id, held.category_id, held.rule_high_water + 1, {}, "rule_changed", True, 1
    )
    async with env.db.transaction() as uow:
        await paced.mark_stale(uow.conn, "org_1", [stale])

    async def refused_and_still_held(draft: Review) -> None:
        with pytest.raises(DomainError) as caught:
            await app.decide(env, HUMAN, draft.id, Decision("approve", draft.revision, draft.version))
        assert caught.value.code is Code.BORN_STALE
        async with env.db.engine.connect() as conn:
            assert await paced.required_high_water(conn, draft.id) == draft.rule_high_water + 1
            now = await store.get_review(conn, draft.project_id, draft.id)
        assert now is not None and now.state is draft.state

    await refused_and_still_held(held)

    late = await opened(env)
    precheck = _kernel.precheck

    async def then_held_stale(*args: Any, **kwargs: Any) -> Any:
        checked = await precheck(*args, **kwargs)
        async with env.db.transaction() as uow:
            await paced.mark_stale(uow.conn, "org_1", [replace(stale, review_id=late.id)])
        return checked

    monkeypatch.setattr(_kernel, "precheck", then_held_stale)
    await refused_and_still_held(late)


async def test_a_second_lifecycle_runs_only_statements_compiled_before(env: Env) -> None:
    """Submit, open, approve and deliver: after the first, none compiles its SQL again."""
    for n in range(2):
        with statements(env.db) as seen:
            queued_ = await queued(env, replace(DRAFT, to=[f"new{n}@acme.com"]))  # a first contact each
            review = await app.open_review(env, HUMAN, queued_.id, queued_.revision, queued_.version)
            await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
        assert any(s.sql.startswith("INSERT INTO contacts") for s in seen)
    assert [s.sql for s in seen if not s.cached] == []
