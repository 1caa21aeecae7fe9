"""The typed events: each nudge reason's payload reads, key for key, as the spec's JSON (an unset
optional field is absent, every other one present), and the reasons are exactly the payloads of
``review.v1.NudgeRequested``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from review_state import app
from review_state.app import Decision, Env
from review_state.domain.machine import Reason
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.review.v1.events_pb2 import NudgeRequested

from tests.review_state.conftest import (
    ADMIN,
    AGENT,
    DRAFT,
    HUMAN,
    REVIEWER,
    opened,
    outbox,
    peers,
    queued,
    reach,
    reasons,
)


async def _last(env: Env, review_id: str, reason: str) -> dict[str, Any]:
    found = [e for e in await outbox(env) if e["review_id"] == review_id and e["reason"] == reason]
    return found[-1]


def test_every_reason_is_a_payload_of_nudge_requested() -> None:
    payloads = NudgeRequested.DESCRIPTOR.oneofs_by_name["payload"].fields
    assert {r.value for r in Reason} == {f.name for f in payloads}


async def test_a_nudge_is_stamped_with_the_reviews_tenancy_and_category(env: Env) -> None:
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="")
    )
    await app.cancel(env, AGENT, review.id, 1, "")
    nudge = await _last(env, review.id, "cancelled")
    assert {k: v for k, v in nudge.items() if k not in ("reason", "payload")} == {
        "review_id": review.id,
        "org_id": "org_1",
        "project_id": "prj_1",
        "agent_id": "agt_1",
        "category_id": "cat_1",
    }
    assert nudge["payload"] == {
        "state": "cancelled",
        "from_state": "needs_review",
        "cancelled_by": "agent",
        "revision": 1,
    }


async def test_front_run_next_names_a_sent_message_only_when_there_is_one(env: Env) -> None:
    cancelled = await reach(env, "cancelled")
    with pytest.raises(DomainError):
        await app.cancel(env, AGENT, cancelled.id, 1, "")
    assert (await _last(env, cancelled.id, "front_run_next"))["payload"] == {
        "state": "cancelled",
        "your_parent_revision": 1,
        "current_revision": 1,
        "diff_available": False,
    }
    sent = await reach(env, "sent")
    with pytest.raises(DomainError):
        await app.cancel(env, AGENT, sent.id, 1, "")
    assert (await _last(env, sent.id, "front_run_next"))["payload"] == {
        "state": "sent",
        "your_parent_revision": 1,
        "current_revision": 1,
        "diff_available": False,
        "sent_message_id": sent.message_id,
    }


async def test_sent_carries_the_decision_or_the_gate_outcome(env: Env) -> None:
    sent = await reach(env, "sent")
    assert sent.sent_at is not None
    assert (await _last(env, sent.id, "sent"))["payload"] == {
        "state": "sent",
        "message_id": sent.message_id,
        "send_path": "human_reviewed",
        "sent_at": sent.sent_at.isoformat().replace("+00:00", "Z"),
        "decision": "approved",
        "approvers": ["key_h"],  # issue 19: whose approval released it
    }
    auto = await reach(env, "auto_sent")
    assert auto.sent_at is not None
    assert (await _last(env, auto.id, "sent"))["payload"] == {
        "state": "auto_sent",
        "message_id": auto.message_id,
        "send_path": "agent_direct",
        "sent_at": auto.sent_at.isoformat().replace("+00:00", "Z"),
        "gate_outcome": "",
        "approvers": [],  # nobody approved an auto send
    }


async def test_a_human_comment_a_rejection_and_an_escalation(env: Env) -> None:
    review = await opened(env)
    chatted, turn = await app.post_chat(env, HUMAN, review.id, "be more concrete")
    assert (await _last(env, review.id, "feedback_added"))["payload"] == {
        "turn_id": turn.id,
        "actor_kind": "human",
        "body": "be more concrete",
        "revision": 1,
    }
    await app.decide(
        env, HUMAN, review.id, Decision("escalate", chatted.revision, chatted.version, feedback="")
    )
    assert (await _last(env, review.id, "redraft_requested"))["payload"] == {
        "revision": 2,
        "by": "human",
        "action": "escalate",
        "feedback": "",
    }
    other = await opened(env)
    await app.decide(
        env, HUMAN, other.id, Decision("reject", other.revision, other.version, feedback="too soft")
    )
    assert (await _last(env, other.id, "rejected"))["payload"] == {
        "revision": 2,
        "feedback": "too soft",
        "by": "human",
    }


async def test_a_breaker_hold_names_the_breaker(env: Env) -> None:
    review = await queued(env)  # no confidence: the low-confidence breaker trips
    result = await app.reviewer_decide(env, REVIEWER, review.id, Decision("approve", 1, 1))
    assert result.forced_by_breaker == "low_confidence"
    assert (await _last(env, review.id, "redraft_requested"))["payload"] == {
        "revision": 1,
        "by": "breaker",
        "forced_by_breaker": "low_confidence",
    }


async def test_a_born_stale_redraft_is_re_nudged_with_the_refusal(env: Env) -> None:
    review = await queued(env)
    peers(env).token_status = "stale"
    with pytest.raises(DomainError) as caught:
        await app.restamp(env, AGENT, app.RestampRequest(review.id, 1, composition_token="tok"))
    assert (await _last(env, review.id, "rule_changed"))["payload"] == {
        "born_stale": True,
        "revision": 1,
        "detail": caught.value.detail,
    }


async def test_a_category_rule_and_a_graduation_carry_what_rules_sent(env: Env) -> None:
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_a", idempotency_key="")
    )
    rule = {"id": "rule_2", "lineage_id": "rln_2", "rev": 2, "rule_text": "Be brief.", "status": "active"}
    changed = {
        "org_id": "org_1",
        "project_id": "prj_1",
        "scope": "category",
        "category_id": "cat_a",
        "agent_id": "",
        "rule": {**rule, "action": "save"},
        "rule_high_water": 4,
    }
    graduated = {
        "org_id": "org_1",
        "project_id": "prj_1",
        "category_id": "cat_a",
        "state": "auto_notify",
        "reason": "graduated",
    }
    events = [
        common_pb2.Event(event_id=f"evt_{i}", aggregate_id="org_1", type=type_, payload=orjson.dumps(body))
        for i, (type_, body) in enumerate((("rule_changed", changed), ("category_changed", graduated)))
    ]
    assert await app.ingest(env, events) == (2, 0)
    assert (await _last(env, review.id, "rule_changed"))["payload"] == {
        "rule": {**rule, "action": "save"},
        "rule_high_water": 4,
        "revision": 1,
    }
    assert (await _last(env, review.id, "recheck_category"))["payload"] == {
        "category_id": "cat_a",
        "state": "auto_notify",
        "reason": "graduated",
    }


async def test_a_decided_review_tells_rules_its_outcome(env: Env) -> None:
    await app.set_policy(env, ADMIN, "require_review")
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="")
    )
    review = await app.open_review(env, HUMAN, review.id, 1, 1)
    await app.decide(env, HUMAN, review.id, Decision("reject", 1, review.version, feedback="no"))
    assert (await outbox(env, "rules"))[-1] == {
        "review_id": review.id,
        "org_id": "org_1",
        "project_id": "prj_1",
        "category_id": "cat_1",
        "outcome": "rejection",
    }


@pytest.mark.parametrize("who", ["human", "admin", "review_agent"])
async def test_a_409_terminal_of_anyone_but_the_composer_queues_no_front_run_next(env: Env, who: str) -> None:
    principal = {"human": HUMAN, "admin": ADMIN, "review_agent": REVIEWER}[who]
    sent = await reach(env, "sent")
    decide = app.reviewer_decide if who == "review_agent" else app.decide
    with pytest.raises(DomainError) as terminal:
        await decide(env, principal, sent.id, Decision("approve", 1, sent.version))
    assert terminal.value.code is Code.TERMINAL
    with pytest.raises(DomainError):
        await app.cancel(env, principal, sent.id, 1, "")
    assert (await reasons(env, sent.id))[-1] == "sent"  # the terminal nudge stays the last
    with pytest.raises(DomainError):
        await app.cancel(env, AGENT, sent.id, 1, "")
    assert (await reasons(env, sent.id))[-1] == "front_run_next"  # the composer's chase still gets one
