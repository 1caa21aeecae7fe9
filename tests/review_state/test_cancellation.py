"""review_state's writes are atomic under cancellation (issue 34): ``Submit``, ``Decide``, and the delivery
worker's claim and close, cancelled at each round trip of their units (``tests.cancellation``), then
retried: one effect, durable, the retry a replay."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator

import pytest
from review_state import app
from review_state.app import Decision, Env
from review_state.app import delivery as delivering
from review_state.domain.review import Review
from reviewloop.storage import Database

from tests.cancellation import Attempt, count, each_await, observer
from tests.review_state.conftest import AGENT, DRAFT, HUMAN, opened
from tests.review_state.test_delivery import lapse_leases


@pytest.fixture
async def seen(env: Env) -> AsyncIterator[Database]:
    db = await observer(env.db)
    yield db
    await db.dispose()


async def _sent_once(env: Env, seen: Database, review_id: str) -> None:
    """Sent, once: the review, its one outbound message, its one terminal nudge, its attempt closed."""
    assert (
        await count(seen, "SELECT count(*) FROM reviews WHERE id = :r AND state = 'sent'", r=review_id) == 1
    )
    assert await count(seen, "SELECT count(*) FROM messages WHERE review_id = :r", r=review_id) == 1
    nudges = (
        "SELECT count(*) FROM outbox WHERE aggregate_id = :r AND destination = 'nudge' AND type = 'nudge'"
    )
    assert await count(seen, nudges, r=review_id) == 1
    closed = "SELECT count(*) FROM delivery_attempts WHERE review_id = :r AND status = 'delivered'"
    assert await count(seen, closed, r=review_id) == 1


async def test_a_submit_cancelled_at_any_round_trip_creates_one_review(env: Env, seen: Database) -> None:
    async def attempt() -> Attempt[tuple[str, Review]]:
        draft = dataclasses.replace(DRAFT, subject=uuid.uuid4().hex)
        key = uuid.uuid4().hex

        async def call() -> tuple[str, Review]:
            return await app.submit(
                env, AGENT, app.SubmitRequest(kind="send", draft=draft, category_id="", idempotency_key=key)
            )

        async def verify(answer: tuple[str, Review]) -> None:
            _, review = answer
            assert await count(seen, "SELECT count(*) FROM reviews WHERE subject = :s", s=draft.subject) == 1
            assert await count(seen, "SELECT count(*) FROM reviews WHERE id = :r", r=review.id) == 1
            again = (await call())[1]
            assert (again.id, again.version) == (review.id, review.version)  # the replay

        return Attempt(call, verify)

    assert await each_await(env.db, attempt) >= 2


async def test_a_decision_cancelled_at_any_round_trip_is_taken_once_and_delivered_once(
    env: Env, seen: Database
) -> None:
    """A keyed approve: the approval's unit, then (in a worker of its own, outside the call's
    cancellation) the delivery."""

    async def attempt() -> Attempt[Review]:
        review = await opened(env)
        key = uuid.uuid4().hex

        async def call() -> Review:
            decision = Decision("approve", review.revision, review.version)
            return await app.decide(env, HUMAN, review.id, decision, idempotency_key=key)

        async def verify(answer: Review) -> None:
            await asyncio.gather(*env.workers.values())
            # An approval committed but cancelled before its worker started leaves the release's claim
            # to lapse; the sweep then delivers it.
            await lapse_leases(env)
            await app.reconcile(env)
            await asyncio.gather(*env.workers.values())
            await _sent_once(env, seen, review.id)
            again = await call()
            assert again.id == review.id and again.state.value in ("approved", "sent")  # the replay
            await _sent_once(env, seen, review.id)

        return Attempt(call, verify)

    assert await each_await(env.db, attempt) >= 2


async def test_a_delivery_cancelled_at_any_round_trip_is_claimed_and_closed_once(
    env: Env, seen: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker (``delivery._work``): its claim, its DATA journal, the provider, its close. A worker
    cancelled mid-way leaves its lease to lapse; the next worker finishes it without a second send."""

    async def attempt() -> Attempt[Review | None]:
        review = await opened(env)
        with monkeypatch.context() as patched:  # the approval starts no worker: the test runs it
            patched.setattr(app.delivery, "start_worker", lambda *args, **kwargs: asyncio.sleep(0))
            await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
        await lapse_leases(env)

        async def call() -> Review | None:
            return await delivering._work(env, review.id, None)

        async def verify(_answer: Review | None) -> None:
            for _ in range(3):  # a cancelled worker's lease lapses, then the next one finishes it
                await lapse_leases(env)
                await delivering._work(env, review.id, None)
            await _sent_once(env, seen, review.id)
            assert await call() is None  # closed: nothing to claim

        return Attempt(call, verify)

    assert await each_await(env.db, attempt) >= 4
