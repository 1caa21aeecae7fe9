"""review_state's messages as the review shapes (``Review``, ``SubmitForReviewResult``, ``ReviewFeedback`` ...), and
the composer's attachments and intent as protobuf."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime

import orjson
from reviewloop.errors import invalid
from reviewloop.protoconv import from_struct, optional_scalars, to_struct
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import AttachmentIn, Review, ReviewIntent

from gateway.translate import Json, enum_name, present, timestamp

# The Review's `optional` scalars the shape answers (rfc_message_id is the inbound mail's, not the review's).
OPTIONAL_FIELDS = tuple(
    name for name in optional_scalars(review_pb2.Review.DESCRIPTOR) if name in Review.model_fields
)


def review_state(value: int) -> str:
    return enum_name(review_pb2.ReviewState, value, "REVIEW_STATE_")


def as_review_turn(turn: review_pb2.Turn) -> Json:
    body: Json = {
        "id": turn.id,
        "seq": turn.seq,
        "turn_type": turn.turn_type,
        "actor_kind": turn.actor_kind,
        "body": turn.body,
        "revision": turn.revision,
        "created_at": timestamp(turn.created_at),
    }
    body.update(present(turn, "action", "actor_id"))
    if turn.diff_json:
        body["diff_json"] = orjson.loads(turn.diff_json)
    return body


def as_message_preview(review_id: str, preview: review_pb2.MessagePreview) -> Json:
    """``MessagePreview``. The wire bytes are ASCII but for an SMTPUTF8 header (UTF-8)."""
    body: Json = {
        "review_id": review_id,
        "revision": preview.revision,
        "version": preview.version,
        "message_sha256": preview.message_sha256,
        "subject": preview.subject,
        "body_text": preview.body_text,
        "html_regenerated": preview.html_regenerated,
        "raw_mime": preview.raw_mime.decode("utf-8", "replace"),
    }
    if preview.body_html:
        body["body_html"] = preview.body_html
    return body


def as_review(review: review_pb2.Review) -> Json:
    """``Review``. ``intent`` is always present (``null`` when the draft has none); ``category_id`` is
    omitted when the draft has none (the SDK types it ``string``, never ``null``)."""
    body: Json = {
        "id": review.id,
        "state": review_state(review.state),
        "revision": review.revision,
        "version": review.version,
        "closed": review.closed,
        "org_id": review.org_id,
        "project_id": review.project_id,
        "agent_id": review.agent_id,
        "kind": enum_name(review_pb2.MessageKind, review.kind, "MESSAGE_KIND_"),
        "from_address": review.from_address,
        "to": list(review.to),
        "cc": list(review.cc),
        "bcc": list(review.bcc),
        "subject": review.subject,
        "body_text": review.body_text,
        "intent": None,
        "created_at": timestamp(review.created_at),
        "updated_at": timestamp(review.updated_at),
        "recheck_completed_through_seq": review.recheck_completed_through_seq,
        # The rule high-water the draft is checked against, and whether its agent named the snapshot it
        # composed under (a composition_token, or the versions): false reads "named none; the high-water
        # is the stack's when it was written, not rules it read".
        "rule_high_water": review.rule_high_water,
        "rule_snapshot_named": not review.rule_snapshot_unnamed,
    }
    if review.HasField("intent"):
        body["intent"] = _intent(review.intent)
    if review.category_id:
        body["category_id"] = review.category_id
    # Present exactly when the message has them (ListFields lists an optional field only when set).
    body.update((field.name, value) for field, value in review.ListFields() if field.name in OPTIONAL_FIELDS)
    if review.headers:
        body["headers"] = dict(review.headers)
    if review.attachments:
        body["attachments"] = [
            {
                "filename": a.filename,
                "content_type": a.content_type,
                "size": len(a.content),
                "content_base64": base64.b64encode(a.content).decode(),
            }
            for a in review.attachments
        ]
    for name in ("decided_at", "sent_at", "undo_until"):
        if review.HasField(name):
            body[name] = timestamp(getattr(review, name))
    if review.turns:
        body["turns"] = [as_review_turn(t) for t in review.turns]
    if review.HasField("delivery"):
        body["delivery"] = as_review_delivery(review.delivery)
    if review.HasField("escalation"):
        body["escalation"] = as_review_escalation(review.escalation)
    return _with_sdk_names(body, review.mode)


def as_review_escalation(escalation: review_pb2.Escalation) -> Json:
    """``ReviewEscalation``: ``overdue`` is read against the clock when the review is answered."""
    target = escalation.target
    deadline = escalation.deadline.ToDatetime(UTC) if escalation.HasField("deadline") else None
    return {
        "escalated_to": (
            {"kind": target.kind, "id": target.id, "name": target.name}
            if escalation.HasField("target")
            else None
        ),
        "deadline": timestamp(escalation.deadline) if deadline is not None else None,
        "overdue": deadline is not None and deadline <= datetime.now(UTC),
        "escalated_at": timestamp(escalation.escalated_at),
        "escalated_by": escalation.escalated_by,
    }


SENT_STATES = frozenset({"sent", "auto_sent"})
# The releases no reviewer decided: the resolved policy sent them without review.
WITHOUT_REVIEW = frozenset({"agent_direct", "graduated_auto"})


def _with_sdk_names(body: Json, asked_mode: str) -> Json:
    """The SDK's ``Review`` names for the same facts, beside the spec's: ``proposed_*`` is the draft as
    it stands, ``sent_*`` what went out (the same draft, once sent), ``intent_*`` the flattened intent.
    ``mode`` is what the agent asked for (when it asked for none, what happened), ``effective_mode``
    what the policy made of it: a ``direct`` request the policy queued reads ``mode: direct``,
    ``effective_mode: review``."""
    effective = "direct" if body.get("send_path") in WITHOUT_REVIEW else "review"
    intent = body["intent"] or {}
    body.update(
        mode=asked_mode or effective,
        effective_mode=effective,
        intent_summary=intent.get("summary", ""),
        proposed_subject=body["subject"],
        proposed_body_text=body["body_text"],
        proposed_to=body["to"],
        proposed_cc=body["cc"],
        proposed_bcc=body["bcc"],
    )
    if intent.get("meta") is not None:
        body["intent_meta"] = intent["meta"]
    if "body_html" in body:
        body["proposed_body_html"] = body["body_html"]
    if "message_id" in body:
        body["sent_message_id"] = body["message_id"]
    if body["state"] in SENT_STATES:
        body["sent_subject"] = body["subject"]
        body["sent_body_text"] = body["body_text"]
    return body


def as_review_delivery(delivery: review_pb2.Delivery) -> Json:
    body: Json = {
        "status": delivery.status,
        "tries": delivery.tries,
        "started_at": timestamp(delivery.started_at),
        "age_s": delivery.age_s,
    }
    if delivery.HasField("parked_at"):
        body["parked_at"] = timestamp(delivery.parked_at)
    for name in ("error", "resolution"):
        if getattr(delivery, name):
            body[name] = getattr(delivery, name)
    return body


def as_review_chat_result(reply: review_pb2.PostChatResponse) -> Json:
    return {**as_review(reply.review), "turn": as_review_turn(reply.turn)}


def as_submit_result(reply: review_pb2.SubmitResponse) -> Json:
    """``SubmitForReviewResult``: the spec's ``status`` and the SDK's ``kind`` discriminator, always the
    same value. ``sent`` is a release (spec 000's ``202 {status: "sent", message_id, review_id}``), with
    ``message`` and ``message_id`` naming the message even while its delivery outlasts the wait (``state``
    ``approved``, ``review.delivery`` says how far it got; the terminal event says how it ended);
    ``queued_for_review`` a draft waiting for a reviewer."""
    review = as_review(reply.review)
    message_id = review.get("message_id") or reply.message_id
    sent = reply.status == "sent"
    body: Json = {
        "kind": "sent" if sent else "queued_for_review",
        "status": reply.status,
        "review_id": review["id"],
        "state": review["state"],
    }
    if sent and message_id:
        message: Json = {"id": message_id}
        if "thread_ref" in review:
            message["thread_id"] = review["thread_ref"]
        body["message"] = message
        body["message_id"] = message_id
    for name in ("thread_ref", "send_error", "gate_outcome"):
        if name in review:
            body[name] = review[name]
    body["review"] = review
    return body


def as_feedback_comment(comment: review_pb2.Comment) -> Json:
    """The SDK's ``ReviewFeedbackComment``: ``actor_id`` where an actor wrote it, ``created_at`` always."""
    body: Json = {"turn_id": comment.turn_id, "actor_kind": comment.actor_kind, "body": comment.body}
    if comment.actor_id:
        body["actor_id"] = comment.actor_id
    body["created_at"] = timestamp(comment.created_at)
    return body


def as_review_feedback(reply: review_pb2.Feedback) -> Json:
    body: Json = {"review_id": reply.review_id, "decision": reply.decision}
    if reply.diff_unified:
        body["diff_unified"] = reply.diff_unified
    if reply.diff_json:
        body["diff_json"] = orjson.loads(reply.diff_json)
    body["comments"] = [as_feedback_comment(c) for c in reply.comments]
    body["new_rules"] = list(reply.new_rules)
    body["approvers"] = list(reply.approvers)
    return body


# review_state's outcome of a reviewer decision -> the spec's ``kind`` and how far the release's delivery got.
_REVIEWER_OUTCOMES: dict[str, tuple[str, str | None]] = {
    "sent": ("sent", "delivered"),
    "queued": ("sent", "queued"),
    "failed": ("sent", "failed"),
    "sent_to_human": ("sent_to_human", None),
}


def as_reviewer_decision_result(result: review_pb2.ReviewerDecision) -> Json:
    kind, delivery = _REVIEWER_OUTCOMES[result.kind]
    answer: Json = {"kind": kind, "sent": result.sent, "sent_to_human": result.sent_to_human}
    if delivery is not None:
        answer["delivery_status"] = delivery
    if result.message_id:
        answer["message_id"] = result.message_id
    if result.thread_id:
        answer["thread_id"] = result.thread_id
    # The SDK types the review as a whole ``Review``; the stub is what an older review_state sends.
    answer["review"] = (
        as_review(result.full_review)
        if result.HasField("full_review")
        else {
            "id": result.review.id,
            "state": review_state(result.review.state),
            "revision": result.review.revision,
        }
    )
    if result.forced_by_breaker:
        answer["forced_by_breaker"] = result.forced_by_breaker
    return answer


def as_review_policy(reply: review_pb2.ReviewPolicy, project: bool = True) -> Json:
    """``ReviewPolicy``; a project's carries its composition setting, an org's default has none."""
    body: Json = {"policy": reply.policy, "source": reply.source}
    if project:
        body["require_composition_token"] = reply.require_composition_token
    return body


def as_contact(reply: review_pb2.Contact) -> Json:
    return {
        "address": reply.address,
        "blocked": reply.blocked,
        "suppressed": reply.suppressed,
        "blocked_at": timestamp(reply.blocked_at) if reply.HasField("blocked_at") else None,
        "blocked_by": reply.blocked_by or None,
        "suppressed_at": timestamp(reply.suppressed_at) if reply.HasField("suppressed_at") else None,
        "suppressed_by": reply.suppressed_by or None,
    }


def as_inbound_message(reply: review_pb2.InboundMessage) -> Json:
    return {
        "message_id": reply.message_id,
        "thread_ref": reply.thread_ref,
        "rfc_message_id": reply.rfc_message_id,
    }


# --- JSON to protobuf -----------------------------------------------------------------------------


def attachments(items: list[AttachmentIn]) -> list[review_pb2.Attachment]:
    result = []
    for i, item in enumerate(items):
        try:
            content = base64.b64decode(item.content_base64, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(f"/attachments/{i}/content_base64", "is not valid base64") from None
        result.append(
            review_pb2.Attachment(filename=item.filename, content_type=item.content_type, content=content)
        )
    return result


def _intent(intent: review_pb2.Intent) -> Json:
    body: Json = {"summary": intent.summary}
    if intent.HasField("meta"):
        body["meta"] = from_struct(intent.meta)
    elif intent.meta_json:  # a review_state of contract 0.1.0-pre.6 or earlier
        body["meta"] = orjson.loads(intent.meta_json)
    return body


def set_intent(target: review_pb2.Intent, intent: ReviewIntent) -> None:
    target.summary = intent.summary
    if intent.meta is not None:
        target.meta.CopyFrom(to_struct(intent.meta))
        target.meta_json = orjson.dumps(intent.meta).decode()  # for a peer of the earlier contract
