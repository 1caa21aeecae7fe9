"""A decision is one unit: its diff and its new rule exist only if the decision committed.

The edit's diff is computed by the real diff app (a dry run) and stored by the diff app's ``Ingest``
from review_state's outbox, as the relay would deliver it; the rules context gets the new rule the
same way (its dry run and ingest are exercised end to end in tests/e2e/test_review_integration.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from diff import app as diff_app
from diff.__main__ import SPEC as DIFF_SPEC
from diff.server import fields_from_proto
from diff.store import DiffKey
from review_state import app
from review_state.app import Decision, Env
from review_state.clients import DiffResult, _fields
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError, http_status
from reviewloop.storage import Database
from reviewloop.storage.inbox import ingest_each
from reviewloop.storage.schema import OUTBOX
from reviewloop.tenancy import Principal
from sqlalchemy import select

from tests.review_state.conftest import AGENT, DRAFT, HUMAN, REVIEWER, FakePeers, OpenDb, outbox, peers


@dataclass
class RealDiffPeers(FakePeers):
    """The fakes, but the edit's diff is the real diff app's, on its own store."""

    diff_db: Database | None = None

    async def compute_diff(
        self,
        principal: Principal,
        review_id: str,
        from_revision: int,
        to_revision: int,
        before: dict[str, Any],
        after: dict[str, Any],
    ) -> DiffResult:
        assert self.diff_db is not None
        stored = await diff_app.compute_diff(
            self.diff_db,
            DiffKey(principal.project_id, review_id, from_revision, to_revision),
            fields_from_proto(_fields(before)),
            fields_from_proto(_fields(after)),
            dry_run=True,
        )
        return DiffResult(
            stored.diff_unified, stored.diff_json, list(stored.fields_changed), stored.input_sha256
        )


async def _relay_diffs(env: Env, diff_db: Database) -> None:
    """Deliver review_state's ``diff`` outbox to the diff app's Ingest (at least once, like the relay)."""
    async with env.db.engine.connect() as conn:
        rows = (
            await conn.execute(select(OUTBOX).where(OUTBOX.c.destination == "diff").order_by(OUTBOX.c.id))
        ).all()
    events = [
        common_pb2.Event(
            event_id=r.event_id, aggregate_id=r.aggregate_id, type=r.type, payload=r.payload.encode()
        )
        for r in rows
    ]
    await ingest_each(diff_db, [*events, *events], diff_app.SUBSCRIPTIONS)


@pytest.fixture
async def diff_env(env: Env, open_db: OpenDb) -> tuple[Env, Database]:
    diff_db = await open_db(DIFF_SPEC)
    real = RealDiffPeers(diff_db=diff_db)
    return Env(env.db, real, env.provider, env.settings), diff_db


async def test_an_edit_that_loses_the_race_leaves_no_diff_and_the_next_edit_goes_through(
    diff_env: tuple[Env, Database],
) -> None:
    env, diff_db = diff_env
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    # The review agent's edit is admitted, then a human opens the draft before the edit's CAS.
    peers(env).on_admit = lambda: app.open_review(env, HUMAN, review.id, 1, 1)
    with pytest.raises(DomainError) as lost:
        await app.reviewer_decide(
            env, REVIEWER, review.id, Decision("edit", 1, 1, body="The reviewer's text.")
        )
    assert lost.value.code is Code.STALE
    assert await outbox(env, "diff") == []  # the loser queued no diff
    # The human edits the same revision with other text: not refused by the loser's diff.
    sent = await app.decide(env, HUMAN, review.id, Decision("edit", 1, 2, body="The human's text."))
    assert (sent.state.value, sent.revision, sent.body_text) == ("sent", 2, "The human's text.")
    await _relay_diffs(env, diff_db)
    stored = await diff_app.get_diff(diff_db, DiffKey(HUMAN.project_id, review.id, 1, 2))
    assert "The human's text." in stored.diff_json and "reviewer" not in stored.diff_json
    feedback = await app.get_feedback(env, AGENT, review.id)
    assert feedback.diff_unified == stored.diff_unified


async def test_concurrent_edits_of_one_revision_store_only_the_winners_diff(
    diff_env: tuple[Env, Database],
) -> None:
    env, diff_db = diff_env
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="")
    )
    opened = await app.open_review(env, HUMAN, review.id, 1, 1)
    texts = [f"Edit number {i}." for i in range(4)]
    results = await asyncio.gather(
        *(app.decide(env, HUMAN, review.id, Decision("edit", 1, opened.version, body=t)) for t in texts),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    # A loser is stale (it lost the CAS), or a 409 naming the state the winner moved the row to.
    assert len(winners) == 1
    assert all(isinstance(e, DomainError) and http_status(e.code) == 409 for e in losers), losers
    await _relay_diffs(env, diff_db)
    stored = await diff_app.get_diff(diff_db, DiffKey(HUMAN.project_id, review.id, 1, 2))
    assert [t for t in texts if t in stored.diff_json] == [winners[0].body_text]
    assert len(await outbox(env, "diff")) == 1


async def test_a_new_rule_on_a_categorized_review_is_general_and_goes_out_only_with_its_decision(
    env: Env,
) -> None:
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="")
    )
    opened = await app.open_review(env, HUMAN, review.id, 1, 1)
    rule = {"rule_text": "Always propose a concrete time."}
    await app.post_chat(env, AGENT, review.id, "a question")  # moves the version: the decision is stale
    with pytest.raises(DomainError) as stale:
        await app.decide(env, HUMAN, review.id, Decision("reject", 1, opened.version, new_rule=rule))
    assert stale.value.code is Code.STALE
    assert await outbox(env, "rules") == []  # a stale decision leaves no rule
    now, _ = await app.get_review(env, HUMAN, review.id)
    decided = await app.decide(env, HUMAN, review.id, Decision("reject", 1, now.version, new_rule=rule))
    assert decided.state.value == "rejected"  # the retry is not refused as a duplicate
    [requested] = [e["rule_requested"] for e in await outbox(env, "rules") if "rule_requested" in e]
    assert requested["scope"] == "general" and requested.get("category_id", "") == ""
    assert requested["source_review_id"] == review.id
    assert (await app.get_feedback(env, AGENT, review.id)).new_rules == [requested["rule_id"]]
    category_rule = {"rule_text": "Name the pilot's start date.", "scope": "category"}
    _, other = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="")
    )
    await app.open_review(env, HUMAN, other.id, 1, 1)
    await app.decide(env, HUMAN, other.id, Decision("reject", 1, 2, new_rule=category_rule))
    last = [e["rule_requested"] for e in await outbox(env, "rules") if "rule_requested" in e][-1]
    assert (last["scope"], last["category_id"]) == ("category", "cat_1")


async def test_a_rule_the_rules_context_refuses_refuses_the_decision_and_writes_nothing(env: Env) -> None:
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="")
    )
    await app.open_review(env, HUMAN, review.id, 1, 1)
    peers(env).rule_refusal = DomainError(Code.BAD_REQUEST, "the rule text looks like a credential")
    with pytest.raises(DomainError) as refused:
        await app.decide(env, HUMAN, review.id, Decision("reject", 1, 2, new_rule={"rule_text": "sk-123"}))
    assert refused.value.code is Code.BAD_REQUEST
    assert (await app.get_review(env, HUMAN, review.id))[0].state.value == "in_review"
    assert await outbox(env, "rules") == []
