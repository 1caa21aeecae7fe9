"""The nudge reasons of spec 000 and the terminal-event guarantee, as data."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    REDRAFT_REQUESTED = "redraft_requested"
    FEEDBACK_ADDED = "feedback_added"
    REJECTED = "rejected"
    RULE_CHANGED = "rule_changed"
    RECHECK_CATEGORY = "recheck_category"
    PROPAGATE_GENERAL_RULE = "propagate_general_rule"
    SENT = "sent"
    SEND_FAILED = "send_failed"
    CANCELLED = "cancelled"
    FRONT_RUN_NEXT = "front_run_next"
    # Reserved: in the enum, never emitted (spec 000).
    STALENESS = "staleness"
    APPROVED = "approved"


RESERVED = frozenset({Reason.STALENESS, Reason.APPROVED})
TERMINAL = frozenset({Reason.SENT, Reason.SEND_FAILED, Reason.CANCELLED})
# The one review that emits two terminal nudges: a failed send the agent then closes out.
TERMINAL_PAIR = (Reason.SEND_FAILED.value, Reason.CANCELLED.value)


def refusal(reason: Reason, terminal_reasons: list[str]) -> str | None:
    """Why a nudge may not be stored after the review's earlier terminal nudges, or None if it may.

    A review has exactly one terminal nudge, last and highest-seq; the one pair is ``send_failed``
    then ``cancelled``. ``front_run_next`` answers a 409 terminal on a closed review, so it follows a
    terminal nudge and never comes without one.
    """
    if reason in RESERVED:
        return f"{reason} is reserved and never emitted"
    if reason is Reason.FRONT_RUN_NEXT:
        return None if terminal_reasons else "front_run_next before the review's terminal nudge"
    if not terminal_reasons:
        return None
    if terminal_reasons == [Reason.SEND_FAILED.value] and reason is Reason.CANCELLED:
        return None
    return f"{reason} after the terminal {terminal_reasons[-1]} nudge"


def collapse_key(review_id: str, reason: Reason, payload: dict[str, object]) -> str | None:
    """``front_run_next`` is keyed on (review, terminal state, parent_revision): a retry loop
    hammering the same 409 collapses to one row. Other reasons never collapse."""
    if reason is not Reason.FRONT_RUN_NEXT:
        return None
    return f"{review_id}:{payload['state']}:{payload['your_parent_revision']}"
