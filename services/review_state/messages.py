"""review_state's messages: its domain records as protobuf and its requests as domain values (the
servicer in ``server.py`` only calls ``app`` between them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError
from reviewloop.protoconv import from_struct, optional_scalars, stamp, to_enum, to_struct
from reviewloop.review.v1 import review_pb2
from reviewloop.storage import utcnow

from review_state import app, store
from review_state.app import Decision
from review_state.domain.escalation import Escalation, target_of
from review_state.domain.feedback import approvers
from review_state.domain.machine import CLOSED, State
from review_state.domain.review import Review, Turn
from review_state.domain.submission import Attachment, Intent

KIND_PREFIX, STATE_PREFIX = "MESSAGE_KIND_", "REVIEW_STATE_"


# The Review's `optional` scalars: set exactly when the record has a value.
OPTIONAL_SCALARS = optional_scalars(review_pb2.Review.DESCRIPTOR)


def state_to_proto(state: State) -> review_pb2.ReviewState.ValueType:
    return review_pb2.ReviewState.ValueType(to_enum(review_pb2.ReviewState, STATE_PREFIX, state.value))


def turn_to_proto(turn: Turn) -> review_pb2.Turn:
    return review_pb2.Turn(
        id=turn.id,
        seq=turn.seq,
        turn_type=turn.turn_type,
        actor_kind=turn.actor_kind,
        actor_id=turn.actor_id,
        body=turn.body,
        revision=turn.revision,
        action=turn.action,
        diff_json=orjson.dumps(turn.diff_json).decode() if turn.diff_json is not None else "",
        created_at=stamp(turn.created_at),
    )


def delivery_to_proto(attempt: store.Attempt) -> review_pb2.Delivery:
    end = attempt.finished_at or utcnow()
    message = review_pb2.Delivery(
        status=app.delivery_status(attempt),
        tries=attempt.tries,
        started_at=stamp(attempt.started_at),
        age_s=round(max((end - attempt.started_at).total_seconds(), 0.0), 3),
        error=attempt.error or "",
        resolution=attempt.resolution or "",
    )
    if attempt.parked_at is not None and attempt.status == "in_flight":
        message.parked_at.CopyFrom(stamp(attempt.parked_at))
    return message


def review_to_proto(
    review: Review, turns: Sequence[Turn] = (), attempt: store.Attempt | None = None
) -> review_pb2.Review:
    message = review_pb2.Review(
        id=review.id,
        org_id=review.org_id,
        project_id=review.project_id,
        agent_id=review.agent_id,
        category_id=review.category_id,
        kind=review_pb2.MessageKind.ValueType(to_enum(review_pb2.MessageKind, KIND_PREFIX, review.kind)),
        state=state_to_proto(review.state),
        revision=review.revision,
        version=review.version,
        closed=review.state in CLOSED,
        to=review.to,
        cc=review.cc,
        bcc=review.bcc,
        subject=review.subject,
        body_text=review.body_text,
        created_at=stamp(review.created_at),
        updated_at=stamp(review.updated_at),
        headers=review.headers,
        attachments=[attachment_to_proto(a) for a in review.attachments],
        from_address=review.from_address,
        rule_high_water=review.rule_high_water,
        rule_snapshot_unnamed=review.rule_snapshot_unnamed,
        recheck_completed_through_seq=review.recheck_completed_through_seq,
        turns=[turn_to_proto(t) for t in turns],
        approvers=approvers(turns, review.revision),
        mode=review.mode or "",
    )
    if review.intent is not None:
        message.intent.summary = review.intent.summary
        if review.intent.meta is not None:
            message.intent.meta.CopyFrom(to_struct(review.intent.meta))
            message.intent.meta_json = orjson.dumps(review.intent.meta).decode()  # for an earlier peer
    for name in OPTIONAL_SCALARS:
        value = getattr(review, name)
        if value is not None:
            setattr(message, name, value)
    if review.message_id is None:
        message.ClearField("rfc_message_id")  # only a delivered message has one worth reading
    for name in ("decided_at", "sent_at", "review_deadline"):
        value = getattr(review, name)
        if value is not None:
            getattr(message, name).CopyFrom(stamp(value))
    if attempt is not None:
        message.delivery.CopyFrom(delivery_to_proto(attempt))
        with_undo_until(message, attempt)
    if review.escalated_at is not None:
        message.escalation.CopyFrom(escalation_to_proto(review))
    return message


def with_undo_until(message: review_pb2.Review, attempt: store.Attempt | None) -> review_pb2.Review:
    """``undo_until`` on ``message`` while its release waits out its undo window."""
    until = attempt.undo_until(utcnow()) if attempt is not None else None
    if until is not None:
        message.undo_until.CopyFrom(stamp(until))
    return message


def attachment_to_proto(attachment: Attachment) -> review_pb2.Attachment:
    return review_pb2.Attachment(
        filename=attachment.filename, content_type=attachment.content_type, content=attachment.content
    )


def attachments_from_proto(items: Sequence[review_pb2.Attachment]) -> tuple[Attachment, ...]:
    return tuple(Attachment(a.filename, a.content_type, a.content) for a in items)


def intent_from_proto(message: review_pb2.Intent, has: bool) -> Intent | None:
    if not has:
        return None
    meta = None
    if message.HasField("meta"):
        meta = from_struct(message.meta)
    elif message.meta_json:  # a sender of contract 0.1.0-pre.6 or earlier
        try:
            meta = orjson.loads(message.meta_json)
        except orjson.JSONDecodeError as exc:
            raise DomainError(Code.BAD_REQUEST, "/intent/meta: not a JSON object") from exc
        if not isinstance(meta, dict):
            raise DomainError(Code.BAD_REQUEST, "/intent/meta: must be a JSON object")
    return Intent(message.summary, meta)


def contact_to_proto(contact: store.Contact) -> review_pb2.Contact:
    message = review_pb2.Contact(
        address=contact.address,
        blocked=contact.blocked,
        suppressed=contact.suppressed,
        blocked_by=contact.blocked_by,
        suppressed_by=contact.suppressed_by,
    )
    if contact.blocked_at is not None:
        message.blocked_at.CopyFrom(stamp(contact.blocked_at))
    if contact.suppressed_at is not None:
        message.suppressed_at.CopyFrom(stamp(contact.suppressed_at))
    return message


def optional_field(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def decision_from_proto(request: review_pb2.DecideRequest) -> Decision:
    new_rule = None
    if request.HasField("new_rule"):
        new_rule = {
            "rule_text": request.new_rule.rule_text,
            "scope": request.new_rule.scope,
            "category_id": request.new_rule.category_id,
            "rule_layer": request.new_rule.rule_layer,
            "scope_agent_id": request.new_rule.scope_agent_id,
        }
    return Decision(
        action=request.action,
        revision=request.revision,
        version=request.version,
        subject=optional_field(request, "subject"),
        body=optional_field(request, "body"),
        feedback=request.feedback,
        new_rule=new_rule,
        body_html=optional_field(request, "body_html"),
        message_sha256=request.message_sha256,
        override_held=request.override_held,
        escalation=escalation_from_proto(request),
    )


def escalation_from_proto(request: review_pb2.DecideRequest) -> Escalation | None:
    """An escalation's target and deadline; None when the request names neither."""
    if not request.HasField("escalate_to") and not request.HasField("escalation_deadline"):
        return None
    target = request.escalate_to
    return Escalation(
        kind=target.kind,
        target_id=target.id,
        name=target.name,
        deadline=request.escalation_deadline.ToDatetime(UTC)
        if request.HasField("escalation_deadline")
        else None,
        notify=tuple(request.notify_addresses),
        review_url=request.review_url,
        by_name=request.decider_name,
    )


def escalation_to_proto(review: Review) -> review_pb2.Escalation:
    assert review.escalated_at is not None
    message = review_pb2.Escalation(
        escalated_at=stamp(review.escalated_at), escalated_by=review.escalated_by or ""
    )
    kind, target_id = target_of(review.escalated_to)
    if kind:
        message.target.CopyFrom(
            review_pb2.EscalationTarget(kind=kind, id=target_id, name=review.escalated_to_name or "")
        )
    if review.escalation_deadline is not None:
        message.deadline.CopyFrom(stamp(review.escalation_deadline))
    return message
