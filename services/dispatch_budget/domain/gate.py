"""The review-run gate (spec 001): counters decide *when* a review may run; the optional classifier
gate decides whether a due review is worth paying for. Pure: the counters, the digest, the decision
mapping and the circuit breaker; the HTTP call lives in ``dispatch_budget.classifier``."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

DIGEST_TEXT_LIMIT = 3000
CHOICES = ("yes", "no", "unclear")
QUESTION = (
    "Does this turn contain a durable, reusable lesson - a correction or standing preference, a "
    "non-trivial procedure that succeeded after trial and error, or a loaded skill that proved wrong?"
)


class GateKind(StrEnum):
    COUNTERS = "counters"
    CLASSIFIER = "classifier"


@dataclass(frozen=True)
class GateConfig:
    """``review.*`` settings with the spec's defaults."""

    enabled: bool = True
    turn_interval: int = 10
    tool_call_threshold: int = 15
    cooldown: timedelta = timedelta(minutes=20)
    max_per_session: int = 8
    gate: GateKind = GateKind.COUNTERS
    confident_no: float = 0.75
    gate_cooldown: timedelta = timedelta(minutes=5)
    timeout_s: float = 2.0
    classifier_url: str = ""
    api_key: str = ""
    breaker_threshold: int = 3


@dataclass(frozen=True)
class SessionState:
    turns: int = 0
    tools: int = 0
    turn_index: int = 0
    reviews: int = 0
    in_flight: bool = False
    enabled: bool = True
    last_review_at: datetime | None = None
    last_gate_call_at: datetime | None = None


def counts(origin: str, depth: int, status: str) -> bool:
    """Only completed turns of top-level agents count; subagents and aborted turns never do."""
    return origin != "subagent" and depth == 0 and status == "completed"


def after_turn(state: SessionState, tool_calls: int) -> SessionState:
    return replace(
        state, turns=state.turns + 1, tools=state.tools + tool_calls, turn_index=state.turn_index + 1
    )


def not_due_reason(
    state: SessionState, config: GateConfig, now: datetime, review_now: bool = False
) -> str | None:
    """Why no review may run now, or None when one may. ``review now`` bypasses enabled, the
    counters and the cooldown; the session budget and the single in-flight rule still apply."""
    if state.in_flight:
        return "in_flight"
    if state.reviews >= config.max_per_session:
        return "budget_spent"
    if review_now:
        return None
    if not (config.enabled and state.enabled):
        return "disabled"
    if state.turns < config.turn_interval and state.tools < config.tool_call_threshold:
        return "not_due"
    if state.last_review_at is not None and now - state.last_review_at < config.cooldown:
        return "cooldown"
    return None


def reset_counters(state: SessionState) -> SessionState:
    """A skipped or successful review resets the turn/tool counters."""
    return replace(state, turns=0, tools=0)


def _truncate(text: str) -> str:
    return text[:DIGEST_TEXT_LIMIT]


def build_digest(
    last_human_message: str,
    last_assistant_message: str,
    tool_results: int,
    loaded_skills: list[str],
    turn: int,
) -> dict[str, Any]:
    """The bounded digest: never tool output, which is where secrets and bulk data live."""
    return {
        "last_human_message": _truncate(last_human_message),
        "last_assistant_message": _truncate(last_assistant_message),
        "tool_results": tool_results,
        "loaded_skills": [s[:200] for s in loaded_skills[:50]],
        "turn": turn,
    }


@dataclass(frozen=True)
class Decision:
    """One gates.jsonl record's decision part."""

    decision: str  # review | skip
    source: str  # counters | classifier
    reason: str
    choice: str | None = None
    confidence: float | None = None
    probability: float | None = None


def fallback(why: str) -> Decision:
    """The gate did not run (or its answer was unusable): the review proceeds."""
    return Decision("review", GateKind.COUNTERS.value, f"fallback: {why}")


def _unit(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0.0 <= number <= 1.0 else None


def decision_from_answer(answer: Any, confident_no: float) -> Decision | None:
    """decisionFromAnswer: only a confident ``no`` skips. None for a missing/malformed answer (the
    caller falls back to review and counts a gate failure)."""
    if not isinstance(answer, dict):
        return None
    choice = answer.get("choice")
    if choice not in CHOICES:
        return None
    confidence = _unit(answer.get("confidence"))
    if "confidence" in answer and confidence is None:
        return None
    probability = _unit(answer.get("probability"))
    shown = (
        f"{choice} (confidence {confidence:.2f})" if confidence is not None else f"{choice} (no confidence)"
    )
    skip = choice == "no" and confidence is not None and confidence >= confident_no
    return Decision(
        "skip" if skip else "review", GateKind.CLASSIFIER.value, shown, choice, confidence, probability
    )


class Breaker:
    """Opens for the life of the process after ``threshold`` consecutive gate failures."""

    def __init__(self, threshold: int = 3) -> None:
        self.threshold = threshold
        self.consecutive = 0
        self.open = False

    def success(self) -> None:
        self.consecutive = 0

    def failure(self) -> None:
        self.consecutive += 1
        if self.consecutive >= self.threshold:
            self.open = True
