"""How a review's decision reads: one derivation, used by the ``sent`` nudge and ``get_review_feedback``
alike, so the two can never disagree (spec 000)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from review_state.domain.review import Turn


@dataclass(frozen=True)
class DecisionTurn:
    action: str  # approve | edit | reject | escalate
    changed: bool  # the edit actually changed subject or body


def decisions_of(turns: Sequence[Turn]) -> list[DecisionTurn]:
    """The reviewer decisions of a review's thread, oldest first."""
    return [DecisionTurn(t.action, t.changed) for t in turns if t.turn_type == "decision"]


def decision_of(decisions: Sequence[DecisionTurn]) -> str:
    """``edited`` when the last reviewer decision changed the draft, ``approved`` when it released it
    as-is (an edit that changed nothing included), ``rejected`` / ``escalated``, else ``none``."""
    if not decisions:
        return "none"
    last = decisions[-1]
    if last.action in ("approve", "edit"):
        return "edited" if last.action == "edit" and last.changed else "approved"
    return {"reject": "rejected", "escalate": "escalated"}.get(last.action, "none")


def outcome_for_rules(decision: str) -> str | None:
    """The review outcome the rules context counts per category: approval, drift, rejection."""
    return {"approved": "clean_approval", "edited": "drift", "rejected": "rejection"}.get(decision)
