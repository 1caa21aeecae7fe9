"""What a producer's ``nudge`` event must carry, checked before anything is stored.

The envelope is review_state's ``NudgeRequested``: review_id, org_id, project_id, agent_id,
category_id, and the payload set under the reason's name. The app hands it over as plain values, the
payload as the JSON object the agent will read. Each reason's payload is checked against spec 000's
example of it where the spec shows one (``sent`` in both flavours, ``send_failed``,
``front_run_next``, ``propagate_general_rule``); the message's types already hold for the others. An
invalid event is refused with the reason why, never stored, and never allowed to crash the relay that
delivered it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nudge.domain.reasons import Reason

ID_MAX = 40
SEND_PATHS = frozenset({"human_reviewed", "reviewer_approved", "graduated_auto", "agent_direct"})
# `auto_sent` is the direct / graduated flavour of `sent`; `sent` is a human or reviewer release.
AUTO_SEND_PATHS = frozenset({"graduated_auto", "agent_direct"})
CLOSED_STATES = frozenset({"sent", "auto_sent", "cancelled", "failed"})


class Invalid(ValueError):
    """The event is not one this service stores; the message says why (for the log)."""


@dataclass(frozen=True)
class Incoming:
    reason: Reason
    review_id: str
    org_id: str
    project_id: str
    agent_id: str
    category_id: str
    payload: dict[str, Any]


def _id(value: str, key: str, *, required: bool = True) -> str:
    if len(value) > ID_MAX or (required and not value):
        raise Invalid(f"{key} must be a non-empty string of at most {ID_MAX} characters")
    return value


def _text(payload: dict[str, Any], key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise Invalid(f"payload.{key} must be a non-empty string")
    return value


def _int(payload: dict[str, Any], key: str) -> int:
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Invalid(f"payload.{key} must be a non-negative integer")
    return value


def _one_of(payload: dict[str, Any], key: str, allowed: frozenset[str]) -> str:
    value = payload.get(key)
    if value not in allowed:
        raise Invalid(f"payload.{key} must be one of {', '.join(sorted(allowed))}; got {value!r}")
    return str(value)


def _equals(payload: dict[str, Any], key: str, expected: object) -> None:
    if payload.get(key) != expected or type(payload.get(key)) is not type(expected):
        raise Invalid(f"payload.{key} must be {expected!r}; got {payload.get(key)!r}")


def _sent(payload: dict[str, Any]) -> None:
    state = _one_of(payload, "state", frozenset({"sent", "auto_sent"}))
    _text(payload, "message_id")
    send_path = _one_of(payload, "send_path", SEND_PATHS)
    if (state == "auto_sent") != (send_path in AUTO_SEND_PATHS):
        raise Invalid(f"payload.state {state} does not match send_path {send_path}")
    if send_path in ("human_reviewed", "reviewer_approved"):
        _one_of(payload, "decision", frozenset({"edited", "approved"}))
    sent_at = _text(payload, "sent_at")
    try:
        datetime.fromisoformat(sent_at)
    except ValueError as exc:
        raise Invalid(f"payload.sent_at must be an RFC 3339 timestamp; got {sent_at!r}") from exc
    # Present only when the review threads one: an empty string would read as an unnamed thread.
    if "thread_ref" in payload:
        _text(payload, "thread_ref")


def _send_failed(payload: dict[str, Any]) -> None:
    _equals(payload, "state", "failed")
    _text(payload, "error")
    _equals(payload, "from_state", "approved")
    _equals(payload, "agent_retryable", False)
    _equals(payload, "next_action", "compose_and_submit_a_new_message")


def _front_run_next(payload: dict[str, Any]) -> None:
    state = _one_of(payload, "state", CLOSED_STATES)
    if state in ("sent", "auto_sent"):
        _text(payload, "sent_message_id")
    _int(payload, "your_parent_revision")
    _int(payload, "current_revision")
    if not isinstance(payload.get("diff_available"), bool):
        raise Invalid("payload.diff_available must be a boolean")


def _propagate_general_rule(payload: dict[str, Any]) -> None:
    rule, siblings = payload.get("rule"), payload.get("siblings")
    if not isinstance(rule, dict):
        raise Invalid("payload.rule must be an object {id, rule_text}")
    _text(rule, "id")
    _text(rule, "rule_text")
    if not isinstance(siblings, dict):
        raise Invalid("payload.siblings must be an object {category_id, pending_count}")
    _int(siblings, "pending_count")
    # Never the whole queue: a few drafts at a time.
    if _int(payload, "suggested_batch") < 1:
        raise Invalid("payload.suggested_batch must be at least 1")


PAYLOAD_CHECKS: dict[Reason, Callable[[dict[str, Any]], None]] = {
    Reason.SENT: _sent,
    Reason.SEND_FAILED: _send_failed,
    Reason.FRONT_RUN_NEXT: _front_run_next,
    Reason.PROPAGATE_GENERAL_RULE: _propagate_general_rule,
}


def check(
    reason: str,
    payload: dict[str, Any],
    *,
    review_id: str,
    org_id: str,
    project_id: str,
    agent_id: str,
    category_id: str,
) -> Incoming:
    """The producer's nudge as an ``Incoming``, or ``Invalid`` saying what is wrong with it.

    ``reason`` is the name the event's payload is set under ("" when none is set).
    """
    if not reason:
        raise Invalid("the event names no reason: no payload is set")
    try:
        known = Reason(reason)
    except ValueError as exc:
        raise Invalid(f"unknown reason {reason!r}") from exc
    payload_check = PAYLOAD_CHECKS.get(known)
    if payload_check:
        payload_check(payload)
    return Incoming(
        reason=known,
        review_id=_id(review_id, "review_id"),
        org_id=_id(org_id, "org_id"),
        project_id=_id(project_id, "project_id"),
        agent_id=_id(agent_id, "agent_id"),
        category_id=_id(category_id, "category_id", required=False),
        payload=payload,
    )


# The reasons a broadcast (a project-wide nudge: ``seq`` 0, no review) may carry: a change every agent of
# the project should learn of, with or without a draft pending.
BROADCAST_REASONS = frozenset({Reason.RULE_CHANGED, Reason.RECHECK_CATEGORY})


@dataclass(frozen=True)
class Broadcast:
    id: str
    reason: Reason
    org_id: str
    # "" reaches every project of the org; ``agent_id`` "" every agent.
    project_id: str
    agent_id: str
    category_id: str
    payload: dict[str, Any]


def check_broadcast(
    reason: str,
    payload: dict[str, Any],
    *,
    broadcast_id: str,
    org_id: str,
    project_id: str,
    agent_id: str,
    category_id: str,
) -> Broadcast:
    """The producer's broadcast as a ``Broadcast``, or ``Invalid`` saying what is wrong with it."""
    if reason not in BROADCAST_REASONS:
        raise Invalid(f"{reason or 'no reason'} is not a broadcast reason")
    if reason == Reason.RULE_CHANGED:
        rule = payload.get("rule")
        if not isinstance(rule, dict):
            raise Invalid("payload.rule must be an object {id, rule_text, ...}")
        _text(rule, "id")
    else:
        _text(payload, "category_id")
        _text(payload, "state")
    return Broadcast(
        id=broadcast_id,
        reason=Reason(reason),
        org_id=_id(org_id, "org_id"),
        project_id=_id(project_id, "project_id", required=False),
        agent_id=_id(agent_id, "agent_id", required=False),
        category_id=_id(category_id, "category_id", required=False),
        payload=payload,
    )
