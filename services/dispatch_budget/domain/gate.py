"""The review-run gate (spec 001): counters decide *when* a review may run; the optional classifier
gate decides whether a due review is worth paying for. Pure: the counters, the digest, the decision
mapping and the circuit breaker; the HTTP call lives in ``dispatch_budget.classifier``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from reviewloop.errors import invalid

DIGEST_TEXT_LIMIT = 3000
MAX_SESSION_ID = 80
MAX_PAGE = 1000
CHOICES = ("yes", "no", "unclear")
QUESTION = (
    "Does this turn contain a durable, reusable lesson - a correction or standing preference, a "
    "non-trivial procedure that succeeded after trial and error, or a loaded skill that proved wrong?"
)


class GateKind(StrEnum):
    COUNTERS = "counters"
    CLASSIFIER = "classifier"


DEFAULT_ENDPOINT = "default"


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
    # The classifier endpoint and its key are the deployment's (issue 35): ``classifier_url`` is the
    # operator's default endpoint, ``classifier_endpoints`` the other (name, url) pairs the operator
    # listed; a project may only pick one of them by name (``classifier_endpoint``), never name a URL.
    classifier_url: str = ""
    classifier_endpoints: tuple[tuple[str, str], ...] = ()
    classifier_endpoint: str = DEFAULT_ENDPOINT
    api_key: str = ""
    breaker_threshold: int = 3
    review_timeout: timedelta = timedelta(minutes=5)  # timeoutMinutes: a review in flight longer is ended

    @property
    def endpoint_names(self) -> tuple[str, ...]:
        """The endpoints a project may pick among: the operator's default (when set) and its list."""
        default = (DEFAULT_ENDPOINT,) if self.classifier_url else ()
        return default + tuple(name for name, _ in self.classifier_endpoints)

    @property
    def endpoint_url(self) -> str:
        """The URL of the picked endpoint; "" when the operator no longer lists it (the gate then
        stays on counters)."""
        if self.classifier_endpoint == DEFAULT_ENDPOINT:
            return self.classifier_url
        return dict(self.classifier_endpoints).get(self.classifier_endpoint, "")


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
    in_flight_since: datetime | None = None
    in_flight_receipt: str | None = None  # the admission receipt of the review in flight, if one was admitted


@dataclass(frozen=True)
class Turn:
    """One turn of an agent session, as the session's hook reports it."""

    origin: str  # "subagent" for a subagent's turn
    depth: int
    status: str  # completed | aborted | failed
    tool_calls: int

    @property
    def counts(self) -> bool:
        """Only completed turns of top-level agents count; subagents and aborted turns never do."""
        return self.origin != "subagent" and self.depth == 0 and self.status == "completed"

    def check(self) -> None:
        if self.tool_calls < 0 or self.depth < 0:
            raise invalid("/tool_calls", "counts are never negative")


def check_session_id(session_id: str) -> None:
    if not session_id or len(session_id) > MAX_SESSION_ID:
        raise invalid("/session_id", "a session id of 1 to 80 characters is required")


def after_turn(state: SessionState, turn: Turn) -> SessionState:
    return replace(
        state, turns=state.turns + 1, tools=state.tools + turn.tool_calls, turn_index=state.turn_index + 1
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


def decided_without_the_gate(
    state: SessionState, config: GateConfig, classifier_active: bool, now: datetime, review_now: bool
) -> Decision | None:
    """A claimed review that needs no classifier call: ``review now``, or the gate's own cooldown
    since this session last called it (the review proceeds). None: ask the gate."""
    if review_now:
        return Decision("review", GateKind.COUNTERS.value, "review now")
    if (
        classifier_active
        and state.last_gate_call_at is not None
        and now - state.last_gate_call_at < config.gate_cooldown
    ):
        return fallback("gate cooldown")
    return None


def after_decision(
    state: SessionState, decision: Decision, now: datetime, last_gate_call_at: datetime | None
) -> SessionState:
    """A skip ends the review and resets the counters; a review is one more of the session's budget."""
    if decision.decision == "skip":
        state = reset_counters(replace(state, in_flight=False, in_flight_since=None, in_flight_receipt=None))
    else:
        state = replace(state, reviews=state.reviews + 1, last_review_at=now)
    return replace(state, last_gate_call_at=last_gate_call_at or state.last_gate_call_at)


def after_review(state: SessionState, succeeded: bool) -> SessionState:
    """The review ended: it is no longer in flight; a successful one resets the counters."""
    state = replace(state, in_flight=False, in_flight_since=None, in_flight_receipt=None)
    return reset_counters(state) if succeeded else state


def timed_out(state: SessionState, config: GateConfig, now: datetime) -> bool:
    """A review in flight for ``timeoutMinutes`` was aborted (spec 001 "The review child"): it ends as
    timed out so the session's next due review can run. A row from before the start was kept counts
    from now on (it is stamped when first seen)."""
    return (
        state.in_flight and state.in_flight_since is not None and overdue(state.in_flight_since, config, now)
    )


def overdue(in_flight_since: datetime, config: GateConfig, now: datetime) -> bool:
    """A review in flight since then is past ``timeoutMinutes``."""
    return now - in_flight_since >= config.review_timeout


# --- per-project gate configuration: an admin's overrides over the environment's defaults ---

_MINUTES = {
    "cooldown_minutes": "cooldown",
    "gate_cooldown_minutes": "gate_cooldown",
    "timeout_minutes": "review_timeout",
}
_COUNTS = ("turn_interval", "tool_call_threshold", "max_per_session")
GATE_SETTINGS = (
    "enabled",
    "gate",
    *_COUNTS,
    *_MINUTES,
    "confident_no",
    "gate_timeout_ms",
    "classifier_endpoint",
)
# Settings a project once could set and no longer may: stored overrides naming them are ignored.
DEPLOYMENT_ONLY = ("classifier_url",)


def check_gate_overrides(raw: Mapping[str, Any], endpoints: Sequence[str] = ()) -> dict[str, Any]:
    """An admin's gate settings, validated; unset settings keep the environment's default. The
    classifier endpoint is picked by name among ``endpoints`` (the operator's list); a URL is refused,
    since the deployment's classifier key would go wherever it points."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if value is None:
            continue
        if name in DEPLOYMENT_ONLY:
            listed = ", ".join(endpoints) or "none are listed"
            raise invalid(
                f"/{name}",
                "the classifier endpoint and its key are deployment settings; pick one of the "
                f"operator's endpoints with classifier_endpoint ({listed})",
            )
        if name not in GATE_SETTINGS:
            raise invalid(f"/{name}", f"unknown gate setting; one of {', '.join(GATE_SETTINGS)}")
        if name == "enabled":
            ok = isinstance(value, bool)
        elif name == "gate":
            ok = value in tuple(GateKind)
        elif name == "classifier_endpoint":
            ok = isinstance(value, str) and value in endpoints
            if not ok:
                listed = ", ".join(endpoints) or "none are listed"
                raise invalid(f"/{name}", f"one of the operator's classifier endpoints: {listed}")
        elif name == "confident_no":
            ok = _unit(value) is not None
        else:  # counts, minutes and milliseconds: non-negative integers
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1_000_000
        if not ok:
            raise invalid(f"/{name}", "not a valid value for this gate setting")
        out[name] = value
    return out


def with_overrides(default: GateConfig, overrides: Mapping[str, Any]) -> GateConfig:
    """The project's effective gate configuration: its overrides over the deployment default."""
    changes: dict[str, Any] = {}
    for name, value in overrides.items():
        if name in DEPLOYMENT_ONLY or name not in GATE_SETTINGS:
            continue  # a URL a project stored before the endpoint became the deployment's: never used
        if name in _MINUTES:
            changes[_MINUTES[name]] = timedelta(minutes=value)
        elif name == "gate":
            changes["gate"] = GateKind(value)
        elif name == "gate_timeout_ms":
            changes["timeout_s"] = value / 1000
        elif name == "confident_no":
            changes["confident_no"] = float(value)
        else:
            changes[name] = value
    return replace(default, **changes)


def gate_settings(config: GateConfig) -> dict[str, Any]:
    """The effective configuration as the API shows it (never the API key)."""
    return {
        "enabled": config.enabled,
        "gate": config.gate.value,
        "turn_interval": config.turn_interval,
        "tool_call_threshold": config.tool_call_threshold,
        "max_per_session": config.max_per_session,
        "cooldown_minutes": config.cooldown.total_seconds() / 60,
        "gate_cooldown_minutes": config.gate_cooldown.total_seconds() / 60,
        "timeout_minutes": config.review_timeout.total_seconds() / 60,
        "confident_no": config.confident_no,
        "gate_timeout_ms": int(config.timeout_s * 1000),
        # Names only: the operator's URLs and key are not a project's to read.
        "classifier_endpoint": config.classifier_endpoint,
        "classifier_endpoints": list(config.endpoint_names),
    }


@dataclass(frozen=True)
class GateRecord:
    """One gates.jsonl record (spec 001 "Observability")."""

    at: datetime
    session: str
    turn: int
    decision: str  # review | skip
    source: str  # counters | classifier
    reason: str
    tool_calls: int
    latency_ms: int
    threshold: float
    choice: str | None = None
    confidence: float | None = None
    probability: float | None = None

    @classmethod
    def of(
        cls,
        decision: Decision,
        *,
        at: datetime,
        session: str,
        state: SessionState,
        latency_ms: int,
        threshold: float,
    ) -> GateRecord:
        return cls(
            at=at,
            session=session,
            turn=state.turn_index,
            decision=decision.decision,
            source=decision.source,
            reason=decision.reason,
            tool_calls=state.tools,
            latency_ms=latency_ms,
            threshold=threshold,
            choice=decision.choice,
            confidence=decision.confidence,
            probability=decision.probability,
        )

    def to_json(self) -> dict[str, Any]:
        """The record as spec 001 spells it; an unset choice, confidence or probability is absent."""
        record: dict[str, Any] = {
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "session": self.session,
            "turn": self.turn,
            "decision": self.decision,
            "source": self.source,
            "reason": self.reason,
            "choice": self.choice,
            "confidence": self.confidence,
            "probability": self.probability,
            "toolCalls": self.tool_calls,
            "latencyMs": self.latency_ms,
            "threshold": self.threshold,
        }
        return {k: v for k, v in record.items() if v is not None}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> GateRecord:
        return cls(
            at=datetime.fromisoformat(str(record["at"]).replace("Z", "+00:00")),
            session=record["session"],
            turn=record["turn"],
            decision=record["decision"],
            source=record["source"],
            reason=record["reason"],
            tool_calls=record["toolCalls"],
            latency_ms=record["latencyMs"],
            threshold=record["threshold"],
            choice=record.get("choice"),
            confidence=record.get("confidence"),
            probability=record.get("probability"),
        )


def page_after(cursor: str, limit: int) -> int:
    """The decision-log id a page starts after; the cursor is the last id of the page before."""
    if not 1 <= limit <= MAX_PAGE:
        raise invalid("/limit", "between 1 and 1000")
    try:
        return int(cursor) if cursor else 0
    except ValueError:
        raise invalid("/cursor", "pass next_cursor as given") from None


def _unit(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0.0 <= number <= 1.0 else None


def skips(choice: Any, confidence: float | None, confident_no: float) -> bool:
    """The one skip rule, shared by the gate and gate-stats: only a ``no`` at least ``confidentNo``
    confident cancels, and ``confidentNo = 1`` keeps the gate observing (it logs, and never cancels,
    spec 001), even at confidence 1."""
    return choice == "no" and confidence is not None and confidence >= confident_no and confident_no < 1


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
    skip = skips(choice, confidence, confident_no)
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
