"""Property test (hypothesis): random verb sequences by random actors never leave the transition table;
every 409's hints name only verbs that then succeed; a closed review has exactly one terminal nudge
(the failed-send pair aside), its last, with only front_run_next after it."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from review_state import app
from review_state.app import Decision, Env, Revision
from review_state.domain.machine import CLOSED, TRANSITIONS, Actor, State, Verb, check_transition
from reviewloop.errors import Code, DomainError

from tests.review_state.conftest import AGENT, DRAFT, HUMAN, REVIEWER, outbox, provider

ACTORS = {Actor.COMPOSER: AGENT, Actor.HUMAN: HUMAN, Actor.REVIEW_AGENT: REVIEWER}
VERB_NAMES = [
    "submit_revision",
    "post_review_chat",
    "restamp_review",
    "cancel_review",
    "open_review",
    "approve",
    "edit",
    "reject",
    "escalate",
]
CONFLICTS = {Code.STALE, Code.WRONG_STATE, Code.TERMINAL, Code.SEND_NEEDS_RECONCILIATION}
TERMINAL_REASONS = {"sent", "send_failed", "cancelled"}

step = st.tuples(
    st.sampled_from(list(ACTORS)),
    st.sampled_from(VERB_NAMES),
    st.booleans(),  # name the current (revision, version), or a stale one
    st.sampled_from(["ok", "ok", "refuse"]),  # what the provider does if this step delivers
)


async def _do(env: Env, actor: Actor, verb: str, review: Any, fresh: bool) -> Any:
    principal = ACTORS[actor]
    rev = review.revision if fresh else review.revision + 1
    ver = review.version if fresh else review.version + 7
    if verb == "submit_revision":
        return await app.submit_revision(
            env, principal, app.SubmitRevisionRequest(review.id, rev, Revision(body_text=f"draft at {rev}"))
        )
    if verb == "post_review_chat":
        return (await app.post_chat(env, principal, review.id, "a chat line"))[0]
    if verb == "restamp_review":
        return await app.restamp(env, principal, app.RestampRequest(review.id, rev, composition_token="tok"))
    if verb == "cancel_review":
        return await app.cancel(env, principal, review.id, rev, "")
    if verb == "open_review":
        return await app.open_review(env, principal, review.id, rev, ver)
    decision = Decision(verb, rev, ver, body="edited body" if verb == "edit" else None)
    if actor is Actor.REVIEW_AGENT:
        return (await app.reviewer_decide(env, principal, review.id, decision)).review
    return await app.decide(env, principal, review.id, decision)


def _legal(before: State, verb: str, actor: Actor, after: State) -> bool:
    target = TRANSITIONS.get((before, Verb(verb), actor))
    if target is State.APPROVED:  # transient: delivery resolves it in the same call
        return after in (State.SENT, State.FAILED)
    return target is after


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=1, max_size=10))
async def test_random_verb_sequences_by_random_actors(
    env: Env, steps: list[tuple[Actor, str, bool, str]]
) -> None:
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="", confidence=0.9),
    )
    for actor, verb, fresh, mode in steps:
        provider(env).mode = mode
        before, _ = await app.get_review(env, HUMAN, review.id)
        try:
            after = await _do(env, actor, verb, before, fresh)
        except DomainError as error:
            now, _ = await app.get_review(env, HUMAN, review.id)
            assert now.version == before.version, "a refused verb mutated the review"
            if error.code not in CONFLICTS:
                continue
            assert error.allowed_actions, "a 409 always carries hints"
            hinted = [v for v in error.allowed_actions if v not in ("get_review", "list_review_events")]
            for hint in hinted:  # every hinted verb passes the table with the current facts...
                check_transition(
                    now, Verb(hint), actor, parent_revision=now.revision, expected_version=now.version
                )
            if hinted:  # ...and really succeeds
                provider(env).mode = "ok"
                retried = await _do(env, actor, hinted[0], now, True)
                assert _legal(now.state, hinted[0], actor, retried.state)
            continue
        finally:
            provider(env).mode = "ok"
        assert after.state not in (State.STALE, State.STALLED)
        if after.gate_outcome and after.gate_outcome.startswith("held:"):
            assert after.state is State.NEEDS_REVIEW  # a breaker held a review agent's release
            continue
        assert _legal(before.state, verb, actor, after.state), (before.state, verb, actor, after.state)

    final, _ = await app.get_review(env, HUMAN, review.id)
    if final.state not in CLOSED or final.state is State.FAILED:
        final = await app.cancel(env, HUMAN, review.id, final.revision, "")
    assert final.state in CLOSED
    events = [e["reason"] for e in await outbox(env) if e["review_id"] == review.id]
    first_terminal = next(i for i, r in enumerate(events) if r in TERMINAL_REASONS)
    tail = [r for r in events[first_terminal:] if r != "front_run_next"]
    assert tail in (["sent"], ["cancelled"], ["send_failed", "cancelled"]), events
    assert all(r in TERMINAL_REASONS | {"front_run_next"} for r in events[first_terminal:])
