"""Property tests (hypothesis) of the pure moves the domain computes for the verbs: whatever a verb's
checks and gates found, the move it asks for is one the transition table accepts."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from review_state.domain.decision import FORCED_PAST_DEADLINE
from review_state.domain.feedback import REVIEWED, delivered_move
from review_state.domain.machine import TRANSITIONS, Actor, State, Verb, check_transition
from review_state.domain.review import Move, Review, Turn
from review_state.domain.revision import Redraft, Restamp, redraft_move, restamp_move
from review_state.domain.submission import Draft, Intent, Route, Threading
from review_state.domain.submitted import Composed, submitted
from reviewloop.errors import DomainError

NOW = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
HOLDS = st.one_of(st.none(), st.sampled_from(["no_category", "daily_cap", "pool_budget", "first_contact"]))

composed = st.builds(
    Composed,
    review_id=st.just("rr_1"),
    org_id=st.just("org_1"),
    project_id=st.just("prj_1"),
    agent_id=st.just("agt_1"),
    category_id=st.sampled_from(["", "cat_1"]),
    kind=st.sampled_from(["send", "reply", "forward"]),
    draft=st.builds(
        Draft,
        to=st.just(["ana@example.com"]),
        cc=st.just([]),
        bcc=st.just([]),
        subject=st.text(max_size=20),
        body_text=st.text(max_size=40),
        intent=st.one_of(st.none(), st.just(Intent("Confirm the Tuesday meeting"))),
    ),
    threading=st.sampled_from([Threading(None, None, None), Threading("thr_1", "<a@x>", "<a@x>")]),
    from_address=st.just("desk@example.com"),
    parent_id=st.one_of(st.none(), st.just("msg_1")),
    confidence=st.one_of(st.none(), st.floats(0, 1)),
    token_named=st.booleans(),
    mode=st.sampled_from(["", "review", "direct"]),
    route=st.sampled_from(list(Route)),
    hold=HOLDS,
    rung=st.sampled_from(["", "supervised", "auto_notify", "auto_silent"]),
    deadline_minutes=st.integers(0, 120),
)


@given(composed, HOLDS, st.integers(0, 50))
def test_a_submit_starts_where_the_table_takes_it_on(c: Composed, held: str | None, high_water: int) -> None:
    """A queued review waits for a reviewer (the human opens it, the platform may release it); a
    released one is approved and goes to delivery. A queue route is never released, a direct one always."""
    new = submitted(c, NOW, held, high_water)
    review = new.review
    assert (review.revision, review.version, review.rule_high_water) == (1, 1, high_water)
    if new.send_path is None:
        assert review.state is State.NEEDS_REVIEW
        assert c.route is not Route.DIRECT
        assert check_transition(review, Verb.OPEN, Actor.HUMAN, parent_revision=1) is State.IN_REVIEW
        assert TRANSITIONS[(review.state, Verb.AUTO_SEND, Actor.SYSTEM)] is State.APPROVED
        expected = NOW + timedelta(minutes=c.deadline_minutes) if c.deadline_minutes else None
        assert review.review_deadline == expected
        assert not new.notify_humans
    else:
        assert review.state is State.APPROVED
        assert c.route is not Route.QUEUE
        assert check_transition(review, Verb.DELIVERED, Actor.SYSTEM) is State.SENT
        assert review.review_deadline is None
        assert new.send_path == ("graduated_auto" if c.route is Route.AUTO_CANDIDATE else "agent_direct")
    if c.route is Route.DIRECT:
        assert new.send_path == "agent_direct"
    if c.route is Route.AUTO_CANDIDATE:
        assert (new.send_path is None) == (held is not None)
        assert review.gate_outcome == (f"held:{held}" if held else "")
    else:
        assert review.gate_outcome is None


def _review(state: State, revision: int, watermark: int, gate_outcome: str | None) -> Review:
    c = Composed(
        "rr_1", "org_1", "prj_1", "agt_1", "cat_1", "send", DRAFT, Threading(None, None, None),
        "desk@example.com", None, None, True, "", Route.QUEUE,
    )  # fmt: skip
    review = submitted(c, NOW, None, 3).review
    return replace(
        review,
        state=state,
        revision=revision,
        recheck_completed_through_seq=watermark,
        gate_outcome=gate_outcome,
    )


DRAFT = Draft(
    ["ana@example.com"], [], [], "Tuesday", "See you Tuesday.", Intent("Confirm the Tuesday meeting")
)
reviews = st.builds(
    _review,
    st.sampled_from(list(State)),
    st.integers(1, 5),
    st.integers(0, 9),
    st.sampled_from([None, "", "held:daily_cap", FORCED_PAST_DEADLINE]),
)
SEQS = st.one_of(st.none(), st.integers(1, 12))
TURN = Turn("turn_1", "", 0, "revision", "agent", "agt_1", "", 0, NOW)


def _lands(review: Review, step: Move, actor: Actor) -> State | None:
    try:
        return check_transition(
            review,
            step.verb,
            actor,
            parent_revision=step.parent_revision,
            expected_version=step.expected_version,
        )
    except DomainError:
        return None


@given(reviews, SEQS, st.integers(0, 60), st.one_of(st.none(), st.floats(0, 1)))
def test_a_redraft_is_the_next_revision_back_in_needs_review(
    before: Review, seq: int | None, minutes: int, confidence: float | None
) -> None:
    redraft = Redraft(before.revision, before.version, DRAFT, confidence, 7, False, seq, minutes)
    step = redraft_move(before, redraft, NOW, TURN)
    after = step.changed
    assert after is not None
    landed = _lands(before, step, Actor.COMPOSER)
    legal = before.state in (State.NEEDS_REVIEW, State.CHATTING, State.REJECTED)
    assert landed is (State.NEEDS_REVIEW if legal else None)
    assert after.revision == before.revision + 1 and after.body_text == DRAFT.body_text
    assert after.recheck_completed_through_seq == max(before.recheck_completed_through_seq, seq or 0)
    assert after.rule_high_water == 7 and after.rule_snapshot_unnamed
    assert after.confidence == (before.confidence if confidence is None else confidence)
    # A deadline that forced the old revision to a human is spent with it; any other outcome stands.
    expected = None if before.gate_outcome == FORCED_PAST_DEADLINE else before.gate_outcome
    assert after.gate_outcome == expected


@given(reviews, SEQS)
def test_a_restamp_keeps_the_revision_and_never_lowers_the_watermark(before: Review, seq: int | None) -> None:
    step = restamp_move(before, Restamp(before.revision, None, 9, seq), TURN)
    after = step.changed
    assert after is not None
    landed = _lands(before, step, Actor.COMPOSER)
    assert landed is (State.NEEDS_REVIEW if before.state is State.NEEDS_REVIEW else None)
    assert (after.revision, after.rule_high_water, after.rule_snapshot_unnamed) == (before.revision, 9, False)
    assert after.recheck_completed_through_seq >= before.recheck_completed_through_seq
    assert after.recheck_completed_through_seq >= (seq or 0)


@given(reviews, st.sampled_from(["human_reviewed", "reviewer_approved", "agent_direct", "graduated_auto"]))
def test_a_delivered_release_closes_as_sent_or_auto_sent(before: Review, send_path: str) -> None:
    step = delivered_move(before, [], send_path, "msg_1", NOW)
    assert step.changed is not None and step.changed.message_id == "msg_1"
    landed = _lands(before, step, Actor.SYSTEM)
    if before.state is not State.APPROVED:
        assert landed is None
    else:
        assert landed is (State.SENT if send_path in REVIEWED else State.AUTO_SENT)
