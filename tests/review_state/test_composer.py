"""Every row of the spec's table "What a composing agent may legally do", and every 409 code, through
the use cases on both backends."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from review_state import app
from review_state.app import Env, Revision
from reviewloop.errors import Code, DomainError

from tests.review_state.conftest import AGENT, HUMAN, peers, queued, reach, reasons

COMPOSER_TABLE = {
    "needs_review": {"submit_revision", "post_review_chat", "restamp_review", "cancel_review"},
    "in_review": {"post_review_chat", "cancel_review"},
    "chatting": {"submit_revision", "post_review_chat", "cancel_review"},
    "rejected": {"submit_revision", "cancel_review"},
    "approved": set(),
    "failed": {"cancel_review"},
    "sent": set(),
    "auto_sent": set(),
    "cancelled": set(),
}

Call = Callable[[Env, Any], Awaitable[Any]]
VERBS: dict[str, Call] = {
    "submit_revision": lambda env, r: app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(r.id, r.revision, Revision(body_text="v2"))
    ),
    "post_review_chat": lambda env, r: app.post_chat(env, AGENT, r.id, "ROI or case study first?"),
    "restamp_review": lambda env, r: app.restamp(
        env, AGENT, app.RestampRequest(r.id, r.revision, composition_token="tok")
    ),
    "cancel_review": lambda env, r: app.cancel(env, AGENT, r.id, r.revision, ""),
}
EXPECTED_CODE = {
    "approved": Code.SEND_NEEDS_RECONCILIATION,
    "sent": Code.TERMINAL,
    "auto_sent": Code.TERMINAL,
    "cancelled": Code.TERMINAL,
}


@pytest.mark.parametrize("state", list(COMPOSER_TABLE))
@pytest.mark.parametrize("verb", list(VERBS))
async def test_every_composer_verb_row(env: Env, state: str, verb: str) -> None:
    review = await reach(env, state)
    assert review.state.value == state
    before = await reasons(env, review.id)
    if verb in COMPOSER_TABLE[state]:
        result = await VERBS[verb](env, review)
        after = result[0] if isinstance(result, tuple) else result
        assert after.version > review.version
        return
    with pytest.raises(DomainError) as caught:
        await VERBS[verb](env, review)
    error = caught.value
    assert error.code is EXPECTED_CODE.get(state, Code.WRONG_STATE)
    assert error.state == state
    hinted = set(error.allowed_actions) - {"get_review", "list_review_events"}
    assert hinted == COMPOSER_TABLE[state]  # derived from the table: never a verb that would 409
    assert error.allowed_actions[-2:] == ["get_review", "list_review_events"]
    (current, _) = await app.get_review(env, AGENT, review.id)
    assert current.version == review.version  # no mutation
    if error.code is Code.TERMINAL:
        assert error.revision is None and error.version is None
        assert error.sent_message_id == review.message_id
        assert (await reasons(env, review.id))[-1] == "front_run_next"
    else:
        assert await reasons(env, review.id) == before


async def test_stale_carries_recovery_facts_and_mutates_nothing(env: Env) -> None:
    review = await queued(env)
    with pytest.raises(DomainError) as caught:
        await app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, 7, Revision(body_text="x"))
        )
    error = caught.value
    assert (error.code, error.state, error.revision, error.version) == (Code.STALE, "needs_review", 1, 1)
    assert "submit_revision" in error.allowed_actions
    assert (await app.get_review(env, AGENT, review.id))[0].version == 1


async def test_born_stale_refuses_without_mutation_and_renudges(env: Env) -> None:
    review = await queued(env)
    fake = peers(env)
    fake.token_status, fake.token_high_water, fake.current_high_water = "stale", 4, 6
    with pytest.raises(DomainError) as caught:
        await app.submit_revision(
            env,
            AGENT,
            app.SubmitRevisionRequest(review.id, 1, Revision(body_text="x"), composition_token="tok"),
        )
    error = caught.value
    assert error.code is Code.BORN_STALE and (error.revision, error.version) == (1, 1)
    assert "restamp_review" in error.allowed_actions and "get_rules" in error.detail
    assert (await app.get_review(env, AGENT, review.id))[0].body_text == review.body_text
    assert await reasons(env, review.id) == ["rule_changed"]
    fake.token_status = "expired"
    with pytest.raises(DomainError) as expired:
        await app.submit_revision(
            env,
            AGENT,
            app.SubmitRevisionRequest(review.id, 1, Revision(body_text="x"), composition_token="tok"),
        )
    assert expired.value.code is Code.BAD_REQUEST and "get_rules" in expired.value.detail


async def test_born_stale_fails_closed_a_redraft_without_a_token_after_the_stack_moved(env: Env) -> None:
    fake = peers(env)
    fake.stack_high_water_now = 5
    review = await queued(env)  # no token: composed under the stack as it stands (high-water 5)
    assert review.rule_high_water == 5
    same = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="v2"))
    )
    assert (same.revision, same.rule_high_water) == (2, 5)  # nothing moved: a tokenless redraft passes
    fake.stack_high_water_now = 7  # a rule of the draft's stack changed
    with pytest.raises(DomainError) as caught:
        await app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, 2, Revision(body_text="v3"))
        )
    error = caught.value
    assert error.code is Code.BORN_STALE and (error.revision, error.version) == (2, same.version)
    assert "restamp_review" in error.allowed_actions and "get_rules" in error.detail
    assert (await app.get_review(env, AGENT, review.id))[0].body_text == "v2"  # no mutation
    assert await reasons(env, review.id) == ["rule_changed"]  # re-nudged, exactly like a stale token
    fake.token_high_water = 7  # a fresh token passes and records its high-water
    fresh = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 2, Revision(body_text="v3"), composition_token="t")
    )
    assert (fresh.revision, fresh.rule_high_water) == (3, 7)
    fake.stack_high_water_now = 8
    with pytest.raises(DomainError):
        await app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, 3, Revision(body_text="v4"))
        )
    fake.token_high_water = 8  # the honest path when nothing needed to change
    restamped = await app.restamp(env, AGENT, app.RestampRequest(review.id, 3, composition_token="t"))
    assert restamped.rule_high_water == 8
    assert (
        await app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, 3, Revision(body_text="v4"))
        )
    ).revision == 4


async def test_the_sdks_rules_version_seen_and_restamp_versions_are_checked_like_a_token(env: Env) -> None:
    fake = peers(env)
    fake.stack_high_water_now, fake.category_rules_version_now, fake.house_style_version_now = 5, 2, 1
    review = await queued(env)
    fake.stack_high_water_now, fake.category_rules_version_now = 7, 3  # a category rule moved
    with pytest.raises(DomainError) as seen_old:
        await app.submit_revision(
            env,
            AGENT,
            app.SubmitRevisionRequest(review.id, 1, Revision(body_text="v2"), rules_version_seen=5),
        )
    assert seen_old.value.code is Code.BORN_STALE
    assert await reasons(env, review.id) == ["rule_changed"]  # re-nudged, exactly like a stale token
    with pytest.raises(DomainError) as seen_ahead:
        await app.submit_revision(
            env,
            AGENT,
            app.SubmitRevisionRequest(review.id, 1, Revision(body_text="v2"), rules_version_seen=8),
        )
    assert seen_ahead.value.violations[0].field == "/rules_version_seen"
    for against, house, code in (
        (2, None, Code.BORN_STALE),
        (3, 0, Code.BORN_STALE),
        (4, None, Code.BAD_REQUEST),
    ):
        with pytest.raises(DomainError) as refused:
            await app.restamp(
                env,
                AGENT,
                app.RestampRequest(review.id, 1, against_version=against, house_style_version=house),
            )
        assert refused.value.code is code
    with pytest.raises(DomainError) as wrong_row:
        await app.restamp(
            env,
            AGENT,
            app.RestampRequest(review.id, 1, expected_version=review.version + 1, against_version=3),
        )
    assert wrong_row.value.code is Code.STALE
    current = (await app.get_review(env, AGENT, review.id))[0]
    assert (current.revision, current.version, current.rule_high_water) == (1, review.version, 5)  # untouched
    restamped = await app.restamp(
        env,
        AGENT,
        app.RestampRequest(
            review.id, 1, expected_version=review.version, against_version=3, house_style_version=1
        ),
    )
    assert (restamped.revision, restamped.rule_high_water) == (1, 7)
    redrafted = await app.submit_revision(
        env,
        AGENT,
        app.SubmitRevisionRequest(
            review.id, 1, Revision(body_text="v2"), expected_version=restamped.version, rules_version_seen=7
        ),
    )
    assert (redrafted.revision, redrafted.rule_high_water) == (2, 7)


async def test_a_restamps_recheck_watermark_rises_under_the_rules_in_force_and_never_falls(env: Env) -> None:
    fake = peers(env)
    fake.stack_high_water_now, fake.category_rules_version_now, fake.house_style_version_now = 5, 2, 1
    review = await queued(env)
    assert review.recheck_completed_through_seq == 0
    fake.stack_high_water_now, fake.category_rules_version_now = 7, 3  # a category rule moved
    # Naming no rules re-read: refused whole, naming the fields that say which rules were re-read.
    with pytest.raises(DomainError) as unnamed:
        await app.restamp(env, AGENT, app.RestampRequest(review.id, 1, recheck_through_seq=2))
    assert unnamed.value.code is Code.BAD_REQUEST
    assert [v.field for v in unnamed.value.violations] == ["/composition_token", "/against_version"]
    # Naming older rules: the draft is behind the rules in force, so the recheck is refused whole.
    with pytest.raises(DomainError) as behind:
        await app.restamp(
            env, AGENT, app.RestampRequest(review.id, 1, recheck_through_seq=2, against_version=2)
        )
    assert behind.value.code is Code.BORN_STALE
    with pytest.raises(DomainError) as zero:
        await app.restamp(
            env, AGENT, app.RestampRequest(review.id, 1, recheck_through_seq=0, against_version=3)
        )
    assert zero.value.violations[0].field == "/recheck_through_seq"
    untouched = (await app.get_review(env, AGENT, review.id))[0]
    assert (untouched.version, untouched.recheck_completed_through_seq) == (review.version, 0)

    stamped = await app.restamp(
        env, AGENT, app.RestampRequest(review.id, 1, against_version=3, recheck_through_seq=4)
    )
    assert (stamped.rule_high_water, stamped.recheck_completed_through_seq) == (7, 4)
    # A lower seq (an older nudge handled late) never moves the watermark back.
    again = await app.restamp(
        env, AGENT, app.RestampRequest(review.id, 1, against_version=3, recheck_through_seq=2)
    )
    assert again.recheck_completed_through_seq == 4
    later = await app.restamp(
        env, AGENT, app.RestampRequest(review.id, 1, against_version=3, recheck_through_seq=6)
    )
    assert later.recheck_completed_through_seq == 6
    redrafted = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="v2"))
    )
    assert redrafted.recheck_completed_through_seq == 6  # the row keeps it across revisions
    handled = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 2, Revision(body_text="v3"), recheck_through_seq=9)
    )
    assert handled.recheck_completed_through_seq == 9  # a redraft records the recheck it handled, too


async def test_a_stale_token_on_a_new_message_is_born_stale_and_queues_nothing(env: Env) -> None:
    peers(env).token_status = "stale"
    with pytest.raises(DomainError) as caught:
        await queued(env, composition_token="tok")
    assert caught.value.code is Code.BORN_STALE


async def test_idempotency_conflict_on_every_mutation(env: Env) -> None:
    review = await queued(env)
    first = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="a"), idempotency_key="k")
    )
    replay = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="a"), idempotency_key="k")
    )
    assert replay.revision == first.revision == 2  # the retry did not redraft twice
    with pytest.raises(DomainError) as caught:
        await app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="b"), idempotency_key="k")
        )
    assert caught.value.code is Code.IDEMPOTENCY_CONFLICT


async def test_a_human_may_close_out_a_failed_send_too(env: Env) -> None:
    review = await reach(env, "failed")
    closed = await app.cancel(env, HUMAN, review.id, review.revision, "")
    assert closed.state.value == "cancelled"
    assert await reasons(env, review.id) == ["send_failed", "cancelled"]
