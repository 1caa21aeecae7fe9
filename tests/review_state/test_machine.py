"""The transition table: its hints never advertise a verb that would 409 (property-tested)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from review_state.domain.machine import (
    CLOSED,
    NUDGES,
    TERMINAL,
    TRANSITIONS,
    Actor,
    Reason,
    State,
    Verb,
    allowed_actions,
    check_transition,
)
from reviewloop.errors import Code, DomainError

COMPOSER_TABLE = {
    State.NEEDS_REVIEW: {"submit_revision", "post_review_chat", "restamp_review", "cancel_review"},
    State.IN_REVIEW: {"post_review_chat", "cancel_review"},
    State.CHATTING: {"submit_revision", "post_review_chat", "cancel_review"},
    State.REJECTED: {"submit_revision", "cancel_review"},
    State.APPROVED: set(),
    State.FAILED: {"cancel_review"},
    State.SENT: set(),
    State.AUTO_SENT: set(),
    State.CANCELLED: set(),
}


@pytest.mark.parametrize("state", list(COMPOSER_TABLE))
def test_composer_verbs_are_exactly_the_spec_table(state: State) -> None:
    hints = allowed_actions(state, Actor.COMPOSER)
    assert set(hints) - {"get_review", "list_review_events"} == COMPOSER_TABLE[state]
    assert hints[-2:] == ["get_review", "list_review_events"]  # never empty, even when terminal


def test_no_agent_has_human_authority() -> None:
    human_verbs = {Verb.APPROVE, Verb.EDIT, Verb.REJECT, Verb.ESCALATE, Verb.OPEN}
    assert not [key for key in TRANSITIONS if key[2] is Actor.COMPOSER and key[1] in human_verbs]


def test_stale_and_stalled_have_no_producer() -> None:
    assert not {State.STALE, State.STALLED} & set(TRANSITIONS.values())


def test_nothing_leaves_a_terminal_state_and_failed_only_closes_out() -> None:
    assert not [key for key in TRANSITIONS if key[0] in TERMINAL]
    assert {TRANSITIONS[key] for key in TRANSITIONS if key[0] is State.FAILED} == {State.CANCELLED}
    assert TERMINAL | {State.FAILED} == CLOSED


@given(
    state=st.sampled_from(list(State)),
    actor=st.sampled_from(list(Actor)),
    verb=st.sampled_from(list(Verb)),
    revision=st.integers(1, 5),
    parent=st.integers(1, 5),
)
@example(state=State.APPROVED, actor=Actor.SYSTEM, verb=Verb.DELIVERED, revision=1, parent=2)
def test_a_hinted_verb_never_409s_and_an_unhinted_one_always_does(
    state: State, actor: Actor, verb: Verb, revision: int, parent: int
) -> None:
    review = SimpleNamespace(state=state, revision=revision, version=3, message_id=None)
    try:
        target = check_transition(review, verb, actor, parent_revision=parent)  # type: ignore[arg-type]
    except DomainError as error:
        assert error.allowed_actions, "a 409 always carries hints"
        if state in TERMINAL:
            assert error.code is Code.TERMINAL and error.revision is None
        elif state is State.APPROVED and (state, verb, actor) not in TRANSITIONS:
            # A send is in flight: nothing but reads (the platform's own outcome verbs still obey the
            # revision CAS below); only the caller that finds the attempt parked says so.
            assert error.code is Code.WRONG_STATE
            assert verb.value not in error.allowed_actions
            if actor is not Actor.SYSTEM:
                assert error.allowed_actions == ["get_review", "list_review_events"]
        elif parent != revision:
            assert error.code is Code.STALE and (error.revision, error.version) == (revision, 3)
        else:
            assert error.code is Code.WRONG_STATE
            assert verb.value not in error.allowed_actions
        return
    assert parent == revision and state not in TERMINAL
    assert verb.value in allowed_actions(state, actor)
    assert target is TRANSITIONS[(state, verb, actor)]


def test_only_the_platform_resolves_approved() -> None:
    assert {key[2] for key in TRANSITIONS if key[0] is State.APPROVED} == {Actor.SYSTEM}


def test_every_nudging_edge_is_an_edge_of_the_table() -> None:
    assert set(NUDGES) <= {(verb, actor) for (_, verb, actor) in TRANSITIONS}


def test_every_edge_into_a_closed_state_emits_its_terminal_nudge() -> None:
    terminal = {State.SENT: Reason.SENT, State.AUTO_SENT: Reason.SENT, State.FAILED: Reason.SEND_FAILED}
    for (_, verb, actor), target in TRANSITIONS.items():
        if target in CLOSED:
            assert NUDGES.get((verb, actor)) is terminal.get(target, Reason.CANCELLED), (verb, actor)


def test_an_edge_into_approved_emits_nothing() -> None:
    # `approved` is transient; its terminal nudge is the delivery's (spec 000: `approved` is reserved).
    for (_, verb, actor), target in TRANSITIONS.items():
        if target is State.APPROVED:
            assert (verb, actor) not in NUDGES
