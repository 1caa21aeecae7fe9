"""rules' ``SaveRule`` is atomic under cancellation (issue 34): cancelled at each round trip of its unit
(``tests.cancellation``), then retried with its idempotency key: one revision and one ``rule_changed``
event, durable, the retry the replay."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from rules import app
from rules.__main__ import SPEC
from rules.app import RuleInput

from tests.cancellation import Attempt, count, each_await, observer
from tests.rules.test_app import SETTINGS, Tenant

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def test_a_saved_rule_cancelled_at_any_round_trip_is_written_once(open_db: OpenDb) -> None:
    env = app.Env(await open_db(SPEC), SETTINGS)
    seen = await observer(env.db)
    try:

        async def attempt() -> Attempt[app.RuleView | None]:
            tenant, text = Tenant(), f"Always propose a concrete time ({uuid.uuid4().hex})."
            key = uuid.uuid4().hex

            async def call() -> app.RuleView | None:
                return await app.save_rule(env, tenant.agent, RuleInput(rule_text=text, idempotency_key=key))

            async def verify(answer: app.RuleView | None) -> None:
                assert answer is not None
                revisions = "SELECT count(*) FROM rule_revisions WHERE rule_text = :t"
                assert await count(seen, revisions, t=text) == 1
                events = "SELECT count(*) FROM outbox WHERE type = 'rule_changed' AND payload LIKE :p"
                assert await count(seen, events, p=f"%{answer.rule.id}%") == 1
                again = await call()
                assert again is not None and again.rule.id == answer.rule.id

            return Attempt(call, verify)

        assert await each_await(env.db, attempt) >= 2
    finally:
        await seen.dispose()
