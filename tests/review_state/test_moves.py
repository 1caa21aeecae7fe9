"""Property tests (hypothesis) of the pure moves the domain computes for the verbs: whatever a verb's
checks and gates found, the move it asks for is one the transition table accepts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from review_state.domain.machine import TRANSITIONS, Actor, State, Verb, check_transition
from review_state.domain.submission import Draft, Intent, Route, Threading
from review_state.domain.submitted import Composed, submitted

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
