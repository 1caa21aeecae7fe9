"""Issue 38's undo window in review_state's use cases: a reviewer's approve or edit waits out the window
before it goes to delivery; its decider may undo it until then and the draft is exactly as the decision
found it; the window's close delivers once (also after a restart), and an undo after it is refused."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from review_state import app
from review_state.app import Decision, Env
from review_state.domain.escalation import PERSON, Escalation
from review_state.domain.machine import TRANSITIONS, Actor, State, Verb, undo_target
from review_state.domain.pacing import StaleDraft
from review_state.domain.review import Review
from review_state.domain.submission import Dial, Draft
from review_state.domain.undo import due, held_again, release_at, restored, snapshot, undoable
from reviewloop.errors import Code, DomainError
from reviewloop.storage import utcnow
from reviewloop.tenancy import ActorKind, Principal

from tests.review_state.conftest import (
    AGENT,
    DRAFT,
    HUMAN,
    REVIEWER,
    opened,
    outbox,
    peers,
    provider,
    queued,
    reasons,
)

HUMAN_B = Principal("org_1", "prj_1", ActorKind.HUMAN, "key_b")
HTML_DRAFT = Draft(**{**DRAFT.__dict__, "body_html": "<p>Let me know your thoughts.</p>"})

# --- the rules, pure ---------------------------------------------------------------------------------

moments = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC))
held_rows = st.builds(
    StaleDraft,
    review_id=st.just("rr_1"),
    project_id=st.just("prj_1"),
    category_id=st.just(""),  # the review's own
    required_high_water=st.integers(min_value=1, max_value=50),
    rule=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    reason=st.sampled_from(["rule_changed", "propagate_general_rule"]),
    propagate=st.booleans(),
    suggested_batch=st.integers(min_value=0, max_value=10),
    nudged_at=st.one_of(st.none(), moments),
)


@given(
    moments, st.floats(min_value=0, max_value=120), st.booleans(), st.floats(min_value=-200, max_value=200)
)
def test_at_every_moment_a_release_is_either_undoable_or_due_never_both(
    decided: datetime, window_s: float, claimed: bool, later_s: float
) -> None:
    release = release_at(decided, window_s)
    now = decided + timedelta(seconds=later_s)
    assert undoable(release, claimed, now) != due(release, claimed, now)
    if window_s == 0:  # the window off: due at once, never undoable
        assert release is None and due(release, claimed, now)
    elif claimed or now >= decided + timedelta(seconds=window_s):
        assert not undoable(release, claimed, now)  # a claimed release or a closed window is delivery's


@given(st.sampled_from(list(State)), st.sampled_from([Actor.HUMAN, Actor.REVIEW_AGENT, Actor.SYSTEM]))
def test_an_undo_returns_only_to_a_state_the_deciders_approval_leaves_from(
    prior: State, actor: Actor
) -> None:
    target = undo_target(prior, actor)
    assert (target is not None) == (TRANSITIONS.get((prior, Verb.APPROVE, actor)) is State.APPROVED)
    assert target in (None, prior)
    # Never an edge of the table: no 409 advertises an undo the clock may already have closed.
    assert all(verb is not Verb.UNDO for (_, verb, _) in TRANSITIONS)


@given(
    st.sampled_from(
        [
            (State.IN_REVIEW, Actor.HUMAN),
            (State.CHATTING, Actor.HUMAN),
            (State.NEEDS_REVIEW, Actor.REVIEW_AGENT),
        ]
    ),
    st.integers(min_value=1, max_value=50),
    st.text(max_size=40),
    st.one_of(st.none(), st.text(max_size=40)),
    st.one_of(st.none(), moments),
    st.one_of(st.none(), held_rows),
)
def test_what_an_undo_writes_back_is_exactly_what_the_decision_found(
    position: tuple[State, Actor],
    revision: int,
    body: str,
    html: str | None,
    deadline: datetime | None,
    held: StaleDraft | None,
) -> None:
    prior, actor = position
    base = Review(
        id="rr_1",
        org_id="org_1",
        project_id="prj_1",
        agent_id="agt_1",
        category_id="",
        kind="send",
        state=prior,
        revision=revision,
        version=revision + 3,
        to=["a@b.c"],
        cc=[],
        bcc=[],
        subject="s",
        body_text=body,
        intent=None,
        created_at=utcnow(),
        updated_at=utcnow(),
        from_address="x@y.z",
    )
    before = replace(base, body_html=html, review_deadline=deadline)
    kept = snapshot(before, held)
    back = restored(kept, actor)
    assert {name: getattr(before, name) for name in back} == back
    assert held_again(kept, before) == held  # the rule hold the decision took, with its place in the window


# --- through the use cases ---------------------------------------------------------------------------


def _window(env: Env, seconds: float) -> None:
    env.settings = replace(env.settings, undo_window_s=seconds)


def _sent_files(env: Env) -> int:
    return len(list(provider(env).directory.glob("*.eml")))


async def _approve(env: Env, who: Principal, review: Review) -> Review:
    return await app.decide(env, who, review.id, Decision("approve", review.revision, review.version))


async def test_an_approval_undone_in_its_window_is_as_it_was_and_nothing_goes_out(env: Env) -> None:
    _window(env, 30)
    review = await opened(env)
    approved = await _approve(env, HUMAN, review)
    assert approved.state is State.APPROVED
    _, _, attempt = await app.read_review(env, HUMAN, review.id)
    assert attempt is not None and attempt.undo_until(utcnow()) is not None
    undone = await app.undo_decision(env, HUMAN, review.id, approved.revision, approved.version)
    assert (undone.state, undone.revision, undone.version) == (State.IN_REVIEW, 1, approved.version + 1)
    assert (undone.send_path, undone.rfc_message_id, undone.decided_at) == (None, None, None)
    read, turns, attempt = await app.read_review(env, HUMAN, review.id)
    assert attempt is None and read == undone
    assert [(t.turn_type, t.actor_id, t.action) for t in turns][-1] == ("undo", "key_h", "approve")
    assert (await app.get_feedback(env, HUMAN, review.id)).approvers == []
    assert not env.releases  # the timer is gone with it
    await asyncio.sleep(0)
    assert await app.reconcile(env) == 0 and _sent_files(env) == 0
    assert await reasons(env, review.id) == []  # no terminal nudge, nor any other
    # The draft's version compare-and-set holds: the version the approval named is stale now.
    with pytest.raises(DomainError) as stale:
        await _approve(env, HUMAN, approved)
    assert stale.value.code is Code.STALE
    # Decided again, with the window off, it goes out once.
    _window(env, 0)
    sent = await _approve(env, HUMAN, undone)
    assert sent.state is State.SENT and _sent_files(env) == 1
    assert await reasons(env, review.id) == ["sent"]


async def test_an_undone_edit_leaves_the_draft_unedited_at_its_revision(env: Env) -> None:
    _window(env, 30)
    review = await queued(env, HTML_DRAFT)
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    edited = await app.decide(
        env, HUMAN, review.id, Decision("edit", review.revision, review.version, body="Thursday 2pm?")
    )
    assert (edited.state, edited.revision, edited.body_text) == (State.APPROVED, 2, "Thursday 2pm?")
    undone = await app.undo_decision(env, HUMAN, review.id, edited.revision, edited.version)
    assert (undone.state, undone.revision) == (State.IN_REVIEW, 1)
    assert (undone.subject, undone.body_text, undone.body_html) == (
        review.subject,
        review.body_text,
        review.body_html,
    )
    assert [r.revision for r in await app.get_revisions(env, HUMAN, review.id)] == [1]
    # The revision the edit wrote is free again: a second edit writes it.
    _window(env, 0)
    again = await app.decide(env, HUMAN, review.id, Decision("edit", 1, undone.version, body="Friday?"))
    assert (again.state, again.revision, again.body_text) == (State.SENT, 2, "Friday?")
    assert _sent_files(env) == 1


async def test_the_window_closing_delivers_once_and_an_undo_after_it_is_refused(env: Env) -> None:
    _window(env, 1.5)
    review = await opened(env)
    approved = await _approve(env, HUMAN, review)
    assert approved.state is State.APPROVED and await reasons(env, review.id) == []
    assert await app.reconcile(env) == 0 and _sent_files(env) == 0  # not due inside the window
    for _ in range(100):
        await asyncio.sleep(0.05)
        if _sent_files(env):
            break
    for _ in range(50):  # the timer's worker records the delivery just after the send
        if (await app.read_review(env, HUMAN, review.id))[0].state is State.SENT:
            break
        await asyncio.sleep(0.05)
    assert _sent_files(env) == 1 and await reasons(env, review.id) == ["sent"]
    with pytest.raises(DomainError) as late:
        await app.undo_decision(env, HUMAN, review.id, approved.revision, approved.version)
    assert late.value.code is Code.WRONG_STATE and ("reason", "already_released") in late.value.hints
    await app.reconcile(env)
    assert _sent_files(env) == 1 and await reasons(env, review.id) == ["sent"]


async def test_a_restart_inside_the_window_still_delivers_after_it_once(env: Env) -> None:
    _window(env, 1.5)
    review = await opened(env)
    approved = await _approve(env, HUMAN, review)
    for timer in env.releases.values():  # the process dies inside the window: its timer with it
        timer.cancel()
    env.releases.clear()
    restarted = Env(env.db, env.peers, env.provider, env.settings)
    assert await app.reconcile(restarted) == 0  # the boot sweep: not due yet
    await asyncio.sleep(0.1)
    assert _sent_files(env) == 0
    await asyncio.sleep(1.5)
    await app.reconcile(restarted)  # the first sweep after the window
    await asyncio.gather(*restarted.workers.values())
    await app.reconcile(restarted)  # and any later one sends nothing again
    await asyncio.gather(*restarted.workers.values())
    assert _sent_files(env) == 1 and await reasons(env, review.id) == ["sent"]
    with pytest.raises(DomainError) as late:
        await app.undo_decision(restarted, HUMAN, review.id, approved.revision, approved.version)
    assert ("reason", "already_released") in late.value.hints


async def test_only_the_decider_undoes_and_with_the_version_it_was_answered(env: Env) -> None:
    _window(env, 30)
    review = await opened(env)
    approved = await _approve(env, HUMAN, review)
    with pytest.raises(DomainError) as other:
        await app.undo_decision(env, HUMAN_B, review.id, approved.revision, approved.version)
    assert other.value.code is Code.FORBIDDEN_SCOPE
    with pytest.raises(DomainError) as stale:
        await app.undo_decision(env, HUMAN, review.id, approved.revision, approved.version - 1)
    assert stale.value.code is Code.STALE
    with pytest.raises(DomainError) as agent:
        await app.undo_decision(env, REVIEWER, review.id, approved.revision, approved.version)
    assert agent.value.code is Code.FORBIDDEN_SCOPE
    undone = await app.undo_decision(env, HUMAN, review.id, approved.revision, approved.version)
    with pytest.raises(DomainError) as twice:  # nothing left to undo
        await app.undo_decision(env, HUMAN, review.id, undone.revision, undone.version)
    assert twice.value.code is Code.WRONG_STATE


async def test_an_undone_approval_counts_toward_no_quorum(env: Env) -> None:
    _window(env, 30)
    peers(env).dial = Dial(0.5, False, 0.0, 200, quorum_approvals=2)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    first = await _approve(env, HUMAN, review)
    assert first.state is State.IN_REVIEW  # short of the quorum
    released = await _approve(env, HUMAN_B, first)
    assert released.state is State.APPROVED
    undone = await app.undo_decision(env, HUMAN_B, review.id, released.revision, released.version)
    assert undone.state is State.IN_REVIEW
    assert (await app.get_feedback(env, HUMAN, review.id)).approvers == ["key_h"]
    # B's approval counts again only when B gives it again.
    _window(env, 0)
    again = await _approve(env, HUMAN_B, undone)
    assert again.state is State.SENT and _sent_files(env) == 1


async def test_a_review_agents_release_is_undone_by_it_and_its_pool_unit_comes_back(env: Env) -> None:
    _window(env, 30)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    result = await app.reviewer_decide(
        env, REVIEWER, review.id, Decision("approve", review.revision, review.version)
    )
    assert (result.kind, result.review.state) == ("queued", State.APPROVED)
    undone = await app.undo_decision(env, REVIEWER, review.id, result.review.revision, result.review.version)
    assert undone.state is State.NEEDS_REVIEW
    settled = await outbox(env, "dispatch_budget")
    assert [e["outcome"] for e in settled if e["review_id"] == review.id] == ["POOL_SEND_OUTCOME_NOT_SENT"]
    assert _sent_files(env) == 0 and await reasons(env, review.id) == []
    assert (await app.read_review(env, REVIEWER, review.id))[2] is None  # no attempt left to claim


async def test_an_undone_approval_of_an_escalated_draft_leaves_it_escalated(env: Env) -> None:
    _window(env, 30)
    review = await opened(env)
    escalated = await app.decide(
        env,
        HUMAN,
        review.id,
        Decision("escalate", review.revision, review.version, escalation=Escalation(PERSON, "key_b", "Bea")),
    )
    assert escalated.escalated_to == "key_b"
    taken = await app.open_review(env, HUMAN_B, review.id, escalated.revision, escalated.version)
    approved = await _approve(env, HUMAN_B, taken)
    assert approved.escalated_at is None  # the approval settles it
    undone = await app.undo_decision(env, HUMAN_B, review.id, approved.revision, approved.version)
    fields = ("escalated_to", "escalated_to_name", "escalated_by", "escalated_at", "escalation_deadline")
    assert [getattr(undone, f) for f in fields] == [getattr(taken, f) for f in fields]
    assert (undone.state, undone.revision) == (taken.state, taken.revision)


async def test_the_category_counts_a_release_once_its_window_closed_and_never_an_undone_one(env: Env) -> None:
    _window(env, 30)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    approved = await _approve(env, HUMAN, review)
    undone = await app.undo_decision(env, HUMAN, review.id, approved.revision, approved.version)
    assert await outbox(env, "rules", "review_outcome") == []  # not at the decision, not at the undo
    _window(env, 1.0)
    await _approve(env, HUMAN, undone)
    assert await outbox(env, "rules", "review_outcome") == []  # still in its window
    for _ in range(100):
        await asyncio.sleep(0.05)
        if (await app.read_review(env, HUMAN, review.id))[0].state is State.SENT:
            break
    await app.reconcile(env)
    outcomes = await outbox(env, "rules", "review_outcome")
    assert [(o["review_id"], o["outcome"]) for o in outcomes] == [(review.id, "clean_approval")]
