"""The review-run gate (spec 001) on SQLite and PostgreSQL: counters, cooldowns, the session budget,
the single in-flight rule, and the classifier gate against a real local HTTP server: every row of
the decision mapping and every guard, the breaker included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from dispatch_budget.bootstrap import config_from_env
from dispatch_budget.classifier import ClassifierGate
from dispatch_budget.domain.gate import GateConfig, GateKind, SessionState, build_digest, not_due_reason
from reviewloop import ssrf
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, utcnow
from reviewloop.tenancy import ActorKind, Principal

from tests.dispatch_budget.classifier_server import ClassifierServer, Script, answer

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_1")
DIGEST = {
    "last_human_message": "No - always use the staging bucket, never prod.",
    "last_assistant_message": "Understood, switching to staging.",
    "loaded_skills": ["deploy"],
}


@pytest.fixture
async def classifier() -> AsyncIterator[ClassifierServer]:
    server = ClassifierServer()
    await server.start()
    yield server
    await server.stop()


# The test classifier listens on loopback, which the SSRF rule refuses unless the deployment allows it.
LOCAL = ssrf.parse_networks(["127.0.0.1/32"])


def counters_gate(**overrides: Any) -> ClassifierGate:
    return ClassifierGate(GateConfig(**{"turn_interval": 3, "tool_call_threshold": 5, **overrides}))


def classifier_gate(server: ClassifierServer, **overrides: Any) -> ClassifierGate:
    config = GateConfig(
        turn_interval=1, gate=GateKind.CLASSIFIER, classifier_url=server.url, api_key="sk-test", timeout_s=1.5
    )
    return ClassifierGate(replace(config, **overrides), allowed_networks=LOCAL)


async def turn(db: Database, gate: ClassifierGate, session: str = "s1", **kw: Any) -> app.TurnResult:
    return await app.record_turn(
        db,
        gate,
        AGENT,
        session,
        app.Turn(
            kw.pop("origin", "user"),
            kw.pop("depth", 0),
            kw.pop("status", "completed"),
            kw.pop("tool_calls", 0),
        ),
        DIGEST,
    )


# --- counters ---


async def test_only_completed_top_level_turns_count(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    gate = counters_gate()
    for kw in ({"origin": "subagent"}, {"depth": 1}, {"status": "aborted"}, {"status": "failed"}):
        result = await turn(db, gate, **kw)
        assert not result.counted and result.not_due_reason == "not_counted"
    assert (await turn(db, gate)).counters.turns == 1


async def test_counters_become_due_on_turns_or_tools_and_a_review_runs_once(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    gate = counters_gate()
    assert (await turn(db, gate)).not_due_reason == "not_due"
    assert (await turn(db, gate)).not_due_reason == "not_due"
    due = await turn(db, gate)
    assert (
        due.decision is not None and due.decision.decision == "review" and due.decision.source == "counters"
    )
    assert due.counters.in_flight and due.counters.reviews == 1
    assert (await turn(db, gate)).not_due_reason == "in_flight"  # no second review while one runs
    after = await app.finish_review(db, AGENT, "s1", succeeded=True)
    assert (after.turns, after.tools, after.in_flight) == (0, 0, False)
    # Tools alone make a session due; the cooldown still holds the next review back.
    assert (await turn(db, gate, tool_calls=6)).not_due_reason == "cooldown"


async def test_concurrent_due_turns_start_one_review(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    gate = counters_gate(turn_interval=1)
    results = await asyncio.gather(*(turn(db, gate) for _ in range(4)))
    assert sum(r.decision is not None for r in results) == 1


async def test_review_now_bypasses_counters_and_cooldown_but_not_the_budget_or_in_flight(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    gate = counters_gate(max_per_session=2, enabled=False)
    assert (await turn(db, gate, tool_calls=50)).not_due_reason == "disabled"
    first = await app.decide_review(db, gate, AGENT, session_id="s1", review_now=True, digest={})
    assert first.decision is not None and first.decision.reason == "review now"
    assert (
        await app.decide_review(db, gate, AGENT, session_id="s1", review_now=True, digest={})
    ).not_due_reason == "in_flight"
    await app.finish_review(db, AGENT, "s1", succeeded=False)
    assert (
        await app.decide_review(db, gate, AGENT, session_id="s1", review_now=True, digest={})
    ).decision is not None
    await app.finish_review(db, AGENT, "s1", succeeded=True)
    spent = await app.decide_review(db, gate, AGENT, session_id="s1", review_now=True, digest={})
    assert spent.not_due_reason == "budget_spent"


async def test_review_off_stops_automatic_reviews(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    gate = counters_gate(turn_interval=1)
    await app.set_review_enabled(db, AGENT, "s1", False)
    assert (await turn(db, gate)).not_due_reason == "disabled"
    await app.set_review_enabled(db, AGENT, "s1", True)
    assert (await turn(db, gate)).decision is not None


def test_the_due_rule_table() -> None:
    config = GateConfig()
    now = utcnow()
    due = SessionState(turns=10)
    assert not_due_reason(due, config, now) is None
    assert not_due_reason(SessionState(tools=15), config, now) is None
    assert not_due_reason(SessionState(turns=9, tools=14), config, now) == "not_due"
    assert not_due_reason(replace(due, last_review_at=now - timedelta(minutes=19)), config, now) == "cooldown"
    assert not_due_reason(replace(due, last_review_at=now - timedelta(minutes=20)), config, now) is None
    assert not_due_reason(replace(due, reviews=8), config, now) == "budget_spent"
    assert not_due_reason(replace(due, enabled=False), config, now) == "disabled"


def test_the_digest_is_bounded_and_carries_no_tool_output() -> None:
    digest = build_digest("h" * 5000, "a" * 4000, 7, ["deploy"], 4)
    assert len(digest["last_human_message"]) == 3000 and len(digest["last_assistant_message"]) == 3000
    assert set(digest) == {
        "last_human_message",
        "last_assistant_message",
        "tool_results",
        "loaded_skills",
        "turn",
    }


# --- the classifier gate against a real HTTP server ---


@pytest.mark.parametrize(
    ("script", "decision", "reason"),
    [
        (answer("no", 0.9, 0.95), "skip", "no (confidence 0.90)"),
        (answer("no", 0.75), "skip", "no (confidence 0.75)"),  # at the threshold: confident
        (answer("no", 0.6), "review", "no (confidence 0.60)"),
        (answer("no"), "review", "no (no confidence)"),
        (answer("yes", 0.92, 0.95), "review", "yes (confidence 0.92)"),
        (answer("unclear", 0.5), "review", "unclear (confidence 0.50)"),
    ],
)
async def test_every_row_of_the_decision_mapping(
    open_db: OpenDb, classifier: ClassifierServer, script: Script, decision: str, reason: str
) -> None:
    db = await open_db(SPEC)
    classifier.script(script)
    result = await turn(db, classifier_gate(classifier), tool_calls=2)
    record = result.decision
    assert record is not None and (record.decision, record.source, record.reason) == (
        decision,
        "classifier",
        reason,
    )
    spelled = record.to_json()  # the gates.jsonl record as spec 001 spells it
    assert spelled["threshold"] == 0.75 and spelled["toolCalls"] == 2 and spelled["turn"] == 1
    assert isinstance(spelled["latencyMs"], int)
    sent = classifier.requests[0]
    assert sent["choices"] == ["yes", "no", "unclear"] and sent["digest"]["loaded_skills"] == ["deploy"]
    assert classifier.headers[0]["authorization"] == "Bearer sk-test"
    # A skip resets the counters and leaves nothing in flight; a review stays in flight.
    assert result.counters.in_flight == (decision == "review")
    assert (result.counters.turns == 0) == (decision == "skip")


@pytest.mark.parametrize(
    ("scripts", "reason", "calls"),
    [
        ([Script(200, b"<html>garbage")], "fallback: malformed answer", 1),
        ([Script(200, b'{"choice": "maybe"}')], "fallback: malformed answer", 1),
        ([Script(200, b'{"choice": "no", "confidence": "high"}')], "fallback: malformed answer", 1),
        ([Script(200, b'{"choice": "no", "confidence": 7}')], "fallback: malformed answer", 1),
        ([Script(200, b"[]")], "fallback: malformed answer", 1),
        ([Script(404, b"{}")], "fallback: classifier unavailable", 1),
        ([Script(401, b"{}")], "fallback: classifier unavailable", 1),
        ([Script(429), Script(429)], "fallback: classifier unavailable", 2),
        ([Script(500), Script(503)], "fallback: classifier unavailable", 2),
        ([Script(200, b"", delay_s=3.0)], "fallback: classifier unavailable", 1),  # past timeout_s
        ([Script(close=True)], "fallback: classifier unavailable", 1),
    ],
)
async def test_failures_fall_back_to_review(
    open_db: OpenDb, classifier: ClassifierServer, scripts: list[Script], reason: str, calls: int
) -> None:
    db = await open_db(SPEC)
    classifier.script(*scripts)
    gate = classifier_gate(classifier)
    record = (await turn(db, gate)).decision
    assert record is not None and (record.decision, record.source, record.reason) == (
        "review",
        "counters",
        reason,
    )
    assert len(classifier.requests) == calls and gate.breaker.consecutive == 1


@pytest.mark.parametrize("first", [Script(429), Script(502)])
async def test_429_and_5xx_are_retried_once(
    open_db: OpenDb, classifier: ClassifierServer, first: Script
) -> None:
    db = await open_db(SPEC)
    classifier.script(first, answer("no", 0.99))
    gate = classifier_gate(classifier)
    record = (await turn(db, gate)).decision
    assert record is not None and record.decision == "skip" and len(classifier.requests) == 2
    assert gate.breaker.consecutive == 0


async def test_three_consecutive_failures_open_the_breaker_for_the_process(
    open_db: OpenDb, classifier: ClassifierServer
) -> None:
    db = await open_db(SPEC)
    # No answer here is slow: a roomy timeout keeps a busy box from turning one into a timeout the
    # classifier never saw (the timeout's own test scripts its delay past the default timeout_s).
    gate = classifier_gate(classifier, timeout_s=5.0)
    classifier.script(
        Script(200, b"garbage"), Script(404), answer("no", 0.9), Script(400), Script(404), Script(404)
    )
    reasons = []
    for i in range(6):
        result = await turn(db, gate, session=f"s{i}")
        assert result.decision is not None
        reasons.append(result.decision.reason)
    # garbage, 404, success (resets), 400, 404, 404 -> open
    assert gate.breaker.open and len(classifier.requests) == 6
    classifier.script(answer("no", 0.99))
    record = (await turn(db, gate, session="s9")).decision
    assert record is not None and record.reason == "fallback: circuit open" and len(classifier.requests) == 6
    assert reasons[2] == "no (confidence 0.90)"


async def test_one_gate_call_per_session_per_gate_cooldown(
    open_db: OpenDb, classifier: ClassifierServer
) -> None:
    db = await open_db(SPEC)
    gate = classifier_gate(classifier)
    classifier.script(answer("no", 0.95), answer("no", 0.95))
    assert (await turn(db, gate)).decision.decision == "skip"  # type: ignore[union-attr]
    second = (await turn(db, gate)).decision
    assert second is not None and second.reason == "fallback: gate cooldown" and len(classifier.requests) == 1
    other = (await turn(db, gate, session="s2")).decision  # another session has its own gate cooldown
    assert other is not None and other.decision == "skip"


async def test_a_missing_key_keeps_the_gate_on_counters_after_one_warning(
    classifier: ClassifierServer, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"REVIEWLOOP_REVIEW_GATE": "classifier", "REVIEWLOOP_REVIEW_GATE_URL": classifier.url}
    for extra in (
        {},
        {"REVIEWLOOP_REVIEW_GATE_API_KEY_ENV": ""},
        {"REVIEWLOOP_REVIEW_GATE_API_KEY_ENV": "NOPE_KEY"},
    ):
        caplog.clear()
        gate = ClassifierGate(config_from_env({**env, **extra}))
        assert not gate.active and gate.config.gate is GateKind.COUNTERS
        assert len([r for r in caplog.records if "stays on counters" in r.message]) == 1
        outcome = await gate.decide({})
        assert outcome.decision.source == "counters" and classifier.requests == []
    keyed = ClassifierGate(
        config_from_env({**env, "REVIEWLOOP_REVIEW_GATE_API_KEY_ENV": "K", "K": "sk"}), allowed_networks=LOCAL
    )
    assert keyed.active and keyed.config.api_key == "sk"


async def test_the_decision_log_lists_every_record_in_order(
    open_db: OpenDb, classifier: ClassifierServer
) -> None:
    db = await open_db(SPEC)
    gate = classifier_gate(classifier)
    classifier.script(answer("no", 0.9), answer("yes", 0.8, 0.9))
    await turn(db, gate, session="a")
    await turn(db, gate, session="b")
    records, cursor = await app.list_gate_decisions(db, AGENT, limit=1)
    assert len(records) == 1 and cursor
    rest, end = await app.list_gate_decisions(db, AGENT, cursor=cursor)
    assert [r.session for r in records + rest] == ["a", "b"] and end == ""
    assert set(rest[0].to_json()) == {
        "at",
        "session",
        "turn",
        "decision",
        "source",
        "reason",
        "choice",
        "confidence",
        "probability",
        "toolCalls",
        "latencyMs",
        "threshold",
    }
    assert (await app.list_gate_decisions(db, AGENT, session_id="b"))[0] == rest
