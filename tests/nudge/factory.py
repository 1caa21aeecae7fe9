"""Producer events as review_state's relay delivers them: ``NudgeRequested`` messages whose payloads
are shaped as spec 000 shows."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from google.protobuf.message import Message
from reviewloop.common.v1 import common_pb2
from reviewloop.ids import new_id
from reviewloop.review.v1.events_pb2 import NudgeRequested
from reviewloop.storage.codec import as_json_object, encode
from reviewloop.tenancy import ActorKind, Principal

AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_1")
N = NudgeRequested

PAYLOADS: dict[str, Message] = {
    "redraft_requested": N.RedraftRequested(revision=1, by="human", action="escalate", feedback="shorter"),
    "feedback_added": N.FeedbackAdded(turn_id="turn_1", actor_kind="human", body="be more pushy", revision=1),
    "rejected": N.Rejected(revision=1, feedback="too long", by="human"),
    "rule_changed": N.RuleChanged(rule_high_water=12, revision=1),
    "recheck_category": N.RecheckCategory(category_id="cat_1", state="auto_notify", reason="graduated"),
    "propagate_general_rule": N.PropagateGeneralRule(
        rule=N.RuleRef(id="rule_1", rule_text="Always propose a concrete time."),
        siblings=N.Siblings(category_id="cat_1", pending_count=499),
        suggested_batch=3,
        rule_high_water=12,
    ),
    "sent": N.Sent(
        state="sent",
        message_id="msg_1",
        send_path="human_reviewed",
        decision="edited",
        sent_at="2026-08-31T09:14:02Z",
        thread_ref="thread_1",
    ),
    "send_failed": N.SendFailed(
        state="failed",
        error="mailbox unavailable",
        from_state="approved",
        agent_retryable=False,
        next_action="compose_and_submit_a_new_message",
    ),
    "cancelled": N.Cancelled(state="cancelled", from_state="needs_review", cancelled_by="agent", revision=1),
    "front_run_next": N.FrontRunNext(
        state="cancelled", your_parent_revision=1, current_revision=1, diff_available=False
    ),
}
# In the reasons enum, never emitted (spec 000): NudgeRequested has no payload to carry them.
RESERVED = ("staleness", "approved")

M = TypeVar("M", bound=Message)


def changed(message: M, *, drop: tuple[str, ...] = (), **fields: Any) -> M:
    """A copy of ``message`` with ``fields`` set and the ``drop`` fields cleared."""
    copy = type(message)()
    copy.CopyFrom(message)
    for name, value in fields.items():
        if isinstance(value, Message):
            getattr(copy, name).CopyFrom(value)
        else:
            setattr(copy, name, value)
    for name in drop:
        copy.ClearField(name)
    return copy


def body(
    review_id: str,
    reason: str,
    payload: Message | None = None,
    *,
    principal: Principal = AGENT,
    agent_id: str | None = None,
    category_id: str = "",
) -> NudgeRequested:
    requested = envelope(review_id, principal=principal, agent_id=agent_id, category_id=category_id)
    getattr(requested, reason).CopyFrom(PAYLOADS[reason] if payload is None else payload)
    return requested


def envelope(
    review_id: str, *, principal: Principal = AGENT, agent_id: str | None = None, category_id: str = ""
) -> NudgeRequested:
    """A ``NudgeRequested`` with no payload (so no reason) set."""
    return NudgeRequested(
        review_id=review_id,
        org_id=principal.org_id,
        project_id=principal.project_id,
        agent_id=agent_id or principal.actor_id,
        category_id=category_id,
    )


def foreign(review_id: str, reason: str, payload: object = None, **kwargs: Any) -> bytes:
    """The JSON a producer would send with ``payload`` under ``reason`` whatever NudgeRequested holds
    there (a reserved or unknown reason, a payload that is not an object): it does not parse."""
    return orjson.dumps({**as_json_object(envelope(review_id, **kwargs)), reason: payload or {}})


def event(review_id: str, reason: str, payload: Message | None = None, **kwargs: Any) -> common_pb2.Event:
    """A ``nudge`` outbox event with a fresh event_id."""
    if reason in RESERVED:
        return raw(foreign(review_id, reason, **kwargs), aggregate_id=review_id)
    return raw(body(review_id, reason, payload, **kwargs), aggregate_id=review_id)


def raw(payload: object, *, aggregate_id: str = "rr_x", type_: str = "nudge") -> common_pb2.Event:
    """An event carrying ``payload``: a message as its proto3 JSON, bytes as given, else as JSON."""
    if isinstance(payload, Message):
        encoded = encode(payload).encode()
    else:
        encoded = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return common_pb2.Event(event_id=new_id("evt"), aggregate_id=aggregate_id, type=type_, payload=encoded)
