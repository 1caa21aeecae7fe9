"""Producer events as review_state's relay delivers them, with payloads shaped as spec 000 shows."""

from __future__ import annotations

from typing import Any

import orjson
from reviewloop.common.v1 import common_pb2
from reviewloop.ids import new_id
from reviewloop.tenancy import ActorKind, Principal

AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_1")

PAYLOADS: dict[str, dict[str, Any]] = {
    "redraft_requested": {"state": "needs_review"},
    "feedback_added": {"turn_id": "turn_1", "body": "be more pushy"},
    "rejected": {"state": "rejected", "feedback": "too long"},
    "rule_changed": {"rule_high_water": 12},
    "recheck_category": {"category_id": "cat_1", "category_state": "auto_notify"},
    "propagate_general_rule": {
        "rule": {"id": "rule_1", "rule_text": "Always propose a concrete time."},
        "siblings": {"category_id": "cat_1", "pending_count": 499},
        "suggested_batch": 3,
    },
    "sent": {
        "state": "sent",
        "message_id": "msg_1",
        "send_path": "human_reviewed",
        "decision": "edited",
        "sent_at": "2026-08-31T09:14:02Z",
        "thread_ref": "thread_1",
    },
    "send_failed": {
        "state": "failed",
        "error": "mailbox unavailable",
        "from_state": "approved",
        "agent_retryable": False,
        "next_action": "compose_and_submit_a_new_message",
    },
    "cancelled": {"state": "cancelled", "from_state": "needs_review", "cancelled_by": "agent", "revision": 1},
    "front_run_next": {
        "state": "cancelled",
        "your_parent_revision": 1,
        "current_revision": 1,
        "diff_available": False,
    },
    "staleness": {},
    "approved": {},
}


def body(
    review_id: str,
    reason: str,
    payload: dict[str, Any] | None = None,
    *,
    principal: Principal = AGENT,
    agent_id: str | None = None,
    category_id: str = "",
) -> dict[str, Any]:
    return {
        "reason": reason,
        "review_id": review_id,
        "org_id": principal.org_id,
        "project_id": principal.project_id,
        "agent_id": agent_id or principal.actor_id,
        "category_id": category_id,
        "payload": PAYLOADS[reason] if payload is None else payload,
    }


def event(
    review_id: str, reason: str, payload: dict[str, Any] | None = None, **kwargs: Any
) -> common_pb2.Event:
    """A ``nudge`` outbox event with a fresh event_id."""
    return raw(body(review_id, reason, payload, **kwargs), aggregate_id=review_id)


def raw(payload: object, *, aggregate_id: str = "rr_x", type_: str = "nudge") -> common_pb2.Event:
    encoded = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return common_pb2.Event(event_id=new_id("evt"), aggregate_id=aggregate_id, type=type_, payload=encoded)
