"""20 concurrent decisions and redrafts against one revision: exactly one wins, the rest are 409 stale
with recovery facts, and nothing is lost or doubled."""

from __future__ import annotations

import asyncio

from review_state import app
from review_state.app import Decision, Env, Revision
from reviewloop.errors import Code, DomainError

from tests.review_state.conftest import AGENT, HUMAN, outbox, reach


async def test_twenty_concurrent_decisions_and_redrafts_exactly_one_wins(env: Env) -> None:
    review = await reach(env, "chatting")
    _, turns_before = await app.get_review(env, HUMAN, review.id)
    nudges_before = len(await outbox(env))

    async def decide(i: int) -> object:
        action = "reject" if i % 2 else "escalate"
        return await app.decide(env, HUMAN, review.id, Decision(action, review.revision, review.version))

    async def redraft(i: int) -> object:
        return await app.submit_revision(
            env,
            AGENT,
            app.SubmitRevisionRequest(review.id, review.revision, Revision(body_text=f"redraft {i}")),
        )

    calls = [decide(i) for i in range(10)] + [redraft(i) for i in range(10)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1, results
    for error in losers:
        assert isinstance(error, DomainError) and error.code is Code.STALE, error
        assert error.state and error.revision == review.revision + 1 and error.version == review.version + 1
        assert error.allowed_actions
    final, turns = await app.get_review(env, HUMAN, review.id)
    assert (final.revision, final.version) == (review.revision + 1, review.version + 1)
    assert len(turns) == len(turns_before) + 1
    assert len(await outbox(env)) - nudges_before <= 1  # the winner's own nudge, if it has one
