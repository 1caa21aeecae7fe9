"""Issue 19 in review_state's use cases: an M-of-N quorum of distinct approvers on the current
revision, and the review-agent deadline breaker whose sweep forces a draft to a human once."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from review_state import app
from review_state.app import Decision, Env
from review_state.domain.review import Review
from review_state.domain.revision import Revision
from review_state.domain.submission import Dial
from reviewloop.errors import Code, DomainError, http_status
from reviewloop.storage import Database, make_engine, utcnow
from reviewloop.tenancy import ActorKind, Principal

from tests.review_state.conftest import AGENT, DRAFT, HUMAN, REVIEWER, outbox, peers, reasons

HUMAN_B = Principal("org_1", "prj_1", ActorKind.HUMAN, "key_b")
HUMAN_C = Principal("org_1", "prj_1", ActorKind.HUMAN, "key_c")


def _dial(**review_settings: int | bool) -> Dial:
    return Dial(0.5, False, 0.0, 200, **review_settings)  # type: ignore[arg-type]


async def _opened(env: Env, category_id: str = "cat_1") -> Review:
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(
            kind="send", draft=DRAFT, category_id=category_id, idempotency_key="", confidence=0.9
        ),
    )
    return await app.open_review(env, HUMAN, review.id, review.revision, review.version)


async def _approve(env: Env, who: Principal, review: Review) -> Review:
    return await app.decide(env, who, review.id, Decision("approve", review.revision, review.version))


async def test_an_edit_voids_earlier_approvals_and_the_quorum_counts_the_final_revision(env: Env) -> None:
    peers(env).dial = _dial(quorum_approvals=2)
    review = await _opened(env)
    first = await _approve(env, HUMAN, review)
    assert (first.state.value, first.revision) == ("in_review", 1)
    # The same approver twice counts once, and writes nothing.
    assert await _approve(env, HUMAN, review) == first
    edited = await app.decide(
        env, HUMAN_B, review.id, Decision("edit", 1, first.version, body="Thursday 2pm?", feedback="tighter")
    )
    # The edit is B's approval of the revision it wrote; A's approval of revision 1 is void.
    assert (edited.state.value, edited.revision) == ("in_review", 2)
    assert (await app.get_feedback(env, HUMAN, review.id)).approvers == ["key_b"]
    sent = await _approve(env, HUMAN, edited)
    assert (sent.state.value, sent.body_text) == ("sent", "Thursday 2pm?")
    feedback = await app.get_feedback(env, HUMAN, review.id)
    assert (feedback.decision, feedback.approvers) == ("edited", ["key_b", "key_h"])
    (terminal,) = [e for e in await outbox(env) if e["review_id"] == review.id and e["reason"] == "sent"]
    assert terminal["payload"]["decision"] == "edited"
    assert terminal["payload"]["approvers"] == ["key_b", "key_h"]
    # The category counts one outcome for the review, the released one: drift (an edit).
    outcomes = [e["outcome"] for e in await outbox(env, "rules") if e.get("review_id") == review.id]
    assert outcomes == ["drift"]
    with pytest.raises(DomainError) as late:
        await _approve(env, HUMAN_C, sent)
    assert late.value.code is Code.TERMINAL


async def test_a_reject_under_a_quorum_returns_the_draft_to_the_agent(env: Env) -> None:
    peers(env).dial = _dial(quorum_approvals=3)
    review = await _opened(env)
    approved = await _approve(env, HUMAN, review)
    rejected = await app.decide(env, HUMAN_B, review.id, Decision("reject", 1, approved.version))
    assert (rejected.state.value, rejected.revision) == ("rejected", 2)
    assert await reasons(env, review.id) == ["rejected"]


async def test_two_approvals_racing_for_the_last_slot_release_once(env: Env) -> None:
    peers(env).dial = _dial(quorum_approvals=2)
    review = await _approve(env, HUMAN, await _opened(env))
    results = await asyncio.gather(
        _approve(env, HUMAN_B, review), _approve(env, HUMAN_C, review), return_exceptions=True
    )
    won = [r for r in results if isinstance(r, Review)]
    lost = [r for r in results if isinstance(r, DomainError)]
    assert len(won) == 1 and won[0].state.value == "sent", results
    # The loser is refused as the row then stood: stale, or the release it lost to (in flight, sent).
    assert [http_status(e.code) for e in lost] == [409]
    assert (await reasons(env, review.id)).count("sent") == 1


async def test_a_review_agent_counts_toward_a_quorum_only_where_the_dial_says(env: Env) -> None:
    peers(env).dial = _dial(quorum_approvals=2)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    held = await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert (held.kind, held.forced_by_breaker) == ("sent_to_human", "quorum_required")

    peers(env).dial = _dial(quorum_approvals=2, quorum_review_agent=True)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    counted = await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert (counted.kind, counted.forced_by_breaker, counted.review.state.value) == (
        "sent_to_human",
        "",
        "needs_review",
    )
    opened = await app.open_review(env, HUMAN, review.id, 1, counted.review.version)
    sent = await _approve(env, HUMAN, opened)
    assert sent.state.value == "sent"
    assert (await app.get_feedback(env, HUMAN, review.id)).approvers == ["agt_r", "key_h"]


async def test_a_full_panel_refuses_another_humans_verb(env: Env) -> None:
    peers(env).dial = _dial(quorum_approvals=2, quorum_panel=2)
    review = await _opened(env)
    first = await _approve(env, HUMAN, review)
    edited = await app.decide(
        env, HUMAN_B, review.id, Decision("edit", 1, first.version, body="Thursday 2pm?", feedback="tighter")
    )
    for action in ("approve", "reject"):
        with pytest.raises(DomainError) as refused:
            await app.decide(env, HUMAN_C, review.id, Decision(action, 2, edited.version))
        assert refused.value.code is Code.FORBIDDEN_SCOPE and http_status(refused.value.code) == 403
        assert ("reason", "quorum_panel_full") in refused.value.hints
        assert "key_h, key_b" in refused.value.detail
    # The panel's own members still decide it.
    assert (await _approve(env, HUMAN, edited)).state.value == "sent"


async def test_the_review_deadline_sweep_forces_a_draft_once_across_two_replicas(env: Env) -> None:
    peers(env).dial = _dial(review_deadline_minutes=30)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    assert review.review_deadline is not None
    assert timedelta(minutes=29) < review.review_deadline - review.created_at <= timedelta(minutes=30)
    assert await app.sweep_review_deadlines(env) == []  # not due yet
    # A second replica: its own engine on the same store.
    url = env.db.engine.url.render_as_string(hide_password=False)
    other = Env(Database(make_engine(url)), env.peers, env.provider, env.settings)
    try:
        later = utcnow() + timedelta(minutes=31)
        swept = await asyncio.gather(
            app.sweep_review_deadlines(env, later), app.sweep_review_deadlines(other, later)
        )
    finally:
        await other.db.dispose()
    assert sorted(len(ids) for ids in swept) == [0, 1]
    assert await reasons(env, review.id) == ["redraft_requested"]
    (nudge,) = await outbox(env)
    assert nudge["payload"]["forced_by_breaker"] == "review_deadline_passed"
    forced, turns = await app.get_review(env, HUMAN, review.id)
    assert (forced.state.value, forced.gate_outcome) == ("needs_review", "held:review_deadline_passed")
    assert [t.turn_type for t in turns] == ["breaker"]
    # Swept again, it stays forced once.
    assert await app.sweep_review_deadlines(env, later) == []
    # A review agent deciding now spends no round and sends it to the human.
    late = await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, forced.version))
    assert (late.kind, late.forced_by_breaker) == ("sent_to_human", "review_deadline_passed")
    assert peers(env).rounds == {}
    # The human queue still has it.
    opened = await app.open_review(env, HUMAN, review.id, 1, forced.version)
    assert (await _approve(env, HUMAN, opened)).state.value == "sent"


async def test_a_review_agent_that_decides_in_time_is_not_forced(env: Env) -> None:
    peers(env).dial = _dial(review_deadline_minutes=30)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    result = await app.reviewer_decide(env, REVIEWER, review.id, Decision("escalate", 1, 1))
    assert result.review.state.value == "needs_review"
    assert await app.sweep_review_deadlines(env, utcnow() + timedelta(hours=1)) == []


async def test_a_redraft_gives_the_review_agent_a_full_window_from_the_redraft(env: Env) -> None:
    peers(env).dial = _dial(review_deadline_minutes=30)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    rejected = await app.reviewer_decide(env, REVIEWER, review.id, Decision("reject", 1, 1))
    assert rejected.review.review_deadline is None  # decided in time: nothing left to force
    assert await app.sweep_review_deadlines(env, utcnow() + timedelta(hours=1)) == []
    redrafted = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 2, Revision(body_text="Thursday 2pm?"))
    )
    assert redrafted.review_deadline is not None
    assert timedelta(minutes=29) < redrafted.review_deadline - utcnow() <= timedelta(minutes=30)
    # The redraft's window, though a review agent decided an earlier revision.
    assert await app.sweep_review_deadlines(env, utcnow() + timedelta(minutes=15)) == []
    assert await app.sweep_review_deadlines(env, utcnow() + timedelta(minutes=31)) == [review.id]
    forced, _ = await app.get_review(env, HUMAN, review.id)
    assert forced.gate_outcome == "held:review_deadline_passed"
    # A redraft of the forced draft opens a new window for the review agent, who may decide again.
    again = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 3, Revision(body_text="Friday 10am?"))
    )
    assert (again.gate_outcome, again.state.value) == (None, "needs_review")
    assert await app.sweep_review_deadlines(env, utcnow() + timedelta(minutes=15)) == []
    sent = await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 4, again.version))
    assert (sent.kind, sent.forced_by_breaker) == ("sent", "")


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    needed=st.integers(min_value=2, max_value=3),
    steps=st.lists(
        st.tuples(
            st.sampled_from([HUMAN, HUMAN_B, HUMAN_C]), st.sampled_from(["approve", "approve", "edit"])
        ),
        min_size=1,
        max_size=8,
    ),
)
async def test_a_draft_is_released_exactly_when_its_quorum_approved_the_current_revision(
    env: Env, needed: int, steps: list[tuple[Principal, str]]
) -> None:
    """A model of the quorum: the approvers standing on the current revision (an edit is its author's
    approval of the revision it writes and voids the rest); the draft goes out exactly when they are
    ``needed``, and the feedback names them."""
    peers(env).dial = _dial(quorum_approvals=needed)
    review = await _opened(env)
    standing: list[str] = []
    for n, (who, action) in enumerate(steps):
        body = f"edit {n}" if action == "edit" else None
        after = await app.decide(
            env, who, review.id, Decision(action, review.revision, review.version, body=body)
        )
        if action == "edit":
            standing = [who.actor_id]
        elif who.actor_id not in standing:
            standing.append(who.actor_id)
        assert (await app.get_feedback(env, HUMAN, review.id)).approvers == standing
        if len(standing) >= needed:
            assert after.state.value == "sent"
            assert (await reasons(env, review.id)) == ["sent"]
            return
        assert (after.state.value, after.revision) == ("in_review", review.revision + (action == "edit"))
        review = after
    assert await reasons(env, review.id) == []
