"""review_state use cases on SQLite and PostgreSQL: compare-and-set under concurrency, the outbox."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
from review_state import app
from review_state.__main__ import SPEC
from review_state.domain.submission import Draft
from reviewloop.errors import Code, DomainError
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.storage.schema import OUTBOX
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import select

AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_1")
HUMAN = Principal("org_1", "prj_1", ActorKind.HUMAN, "key_1")
DRAFT = Draft(
    to=["vp@acme.com"],
    cc=[],
    bcc=[],
    subject="Q3",
    body_text="Hi",
    intent={"summary": "Re-engage cold lead at Acme"},
)

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def _outbox(db: Database) -> list[dict[str, object]]:
    async with db.engine.connect() as conn:
        rows = (await conn.execute(select(OUTBOX).order_by(OUTBOX.c.id))).all()
    return [orjson.loads(r.payload) for r in rows]


async def test_concurrent_cancels_commit_once_and_emit_one_terminal_nudge(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    review = await app.submit(db, AGENT, kind="send", draft=DRAFT, category_id="", idempotency_key="")

    async def cancel(principal: Principal) -> str:
        try:
            return (await app.cancel(db, principal, review.id, 1, "")).state.value
        except DomainError as error:
            return error.code.value

    outcomes = await asyncio.gather(*(cancel(p) for p in (AGENT, HUMAN, AGENT, HUMAN)))
    assert outcomes.count("cancelled") == 1
    assert set(outcomes) - {"cancelled"} <= {Code.TERMINAL.value, Code.STALE.value}
    reasons = [event["reason"] for event in await _outbox(db)]
    assert reasons.count("cancelled") == 1
    assert set(reasons) <= {"cancelled", "front_run_next"}


async def test_a_refused_submit_writes_nothing(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    for draft in (Draft(**{**DRAFT.__dict__, "intent": None}), Draft(**{**DRAFT.__dict__, "to": []})):
        try:
            await app.submit(db, AGENT, kind="send", draft=draft, category_id="", idempotency_key="k")
        except DomainError:
            pass
        else:
            raise AssertionError("accepted a bad draft")
    reviews, _ = await app.list_reviews(
        db, AGENT, states=[], agent_id="", category_id="", cursor="", limit=10
    )
    assert reviews == [] and await _outbox(db) == []


async def test_only_the_composing_agent_cancels_as_composer(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    review = await app.submit(db, AGENT, kind="send", draft=DRAFT, category_id="", idempotency_key="")
    other = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_2")
    try:
        await app.cancel(db, other, review.id, 1, "")
    except DomainError as error:
        assert error.code is Code.FORBIDDEN_ACTOR
    assert (await app.get_review(db, AGENT, review.id)).state.value == "needs_review"
