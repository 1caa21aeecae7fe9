"""The review routes of spec 000: the composer's plane, the reviewer planes, and the console's review
policy, contact blocks / suppressions and inbound mail. Each route's operation_id is the spec's verb."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from reviewloop.errors import invalid
from reviewloop.review.v1 import review_pb2
from reviewloop.tenancy import ActorKind, Principal

from gateway.auth import (
    AGENT,
    ANY_PROJECT_KEY,
    COMPOSER_OR_HUMAN,
    Caller,
    console_principal,
    require,
    require_admin,
)
from gateway.backends import Backends, backends
from gateway.headers import IdempotencyKey
from gateway.translate import INT64_MAX, enum_name, timestamp

router = APIRouter(tags=["reviews"])

MAX_BODY_TEXT = 2 * 1024 * 1024
Backend = Annotated[Backends, Depends(backends)]
Address = Annotated[str, Field(max_length=320)]
Addresses = list[Address]
HUMAN = require(ActorKind.HUMAN, ActorKind.ADMIN)
REVIEWER = require(ActorKind.HUMAN, ActorKind.ADMIN, ActorKind.REVIEW_AGENT)
Admin = Annotated[Caller, Depends(require_admin)]


# --- request bodies -------------------------------------------------------------------------------


class IntentIn(BaseModel):
    """ReviewIntent: the one-sentence summary the human reviewer reads."""

    model_config = ConfigDict(extra="forbid")
    summary: str = Field(max_length=2000)
    meta: dict[str, Any] | None = None


class AttachmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filename: str = Field(min_length=1, max_length=255)
    content_type: str = Field(min_length=3, max_length=255)
    content_base64: str


class _Composed(BaseModel):
    """What every outbound verb may carry besides its recipients and subject."""

    model_config = ConfigDict(extra="forbid")
    cc: Addresses = Field(default_factory=list, max_length=100)
    bcc: Addresses = Field(default_factory=list, max_length=100)
    body_text: str = Field(max_length=MAX_BODY_TEXT)
    body_html: str | None = Field(default=None, max_length=MAX_BODY_TEXT)
    reply_to: Address | None = None
    headers: dict[str, str] | None = Field(default=None, max_length=50)
    attachments: list[AttachmentIn] | None = Field(default=None, max_length=20)
    intent: IntentIn | None = None
    category_id: str | None = Field(default=None, max_length=40)
    confidence: float | None = Field(default=None, ge=0, le=1)
    composition_token: str | None = Field(default=None, max_length=4096)


class SendIn(_Composed):
    to: Addresses = Field(min_length=1, max_length=100)
    subject: str = Field(max_length=998)


class ReplyIn(_Composed):
    """A reply's recipients and Re: subject are materialized from the message replied to."""

    to: Addresses = Field(default_factory=list, max_length=100)
    subject: str = Field(default="", max_length=998)


class ForwardIn(_Composed):
    """A forward's subject and quoted parent body are materialized; ``body_text`` is your note above it."""

    to: Addresses = Field(min_length=1, max_length=100)
    subject: str = Field(default="", max_length=998)
    body_text: str = Field(default="", max_length=MAX_BODY_TEXT)


class CancelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parent_revision: int = Field(ge=1, le=INT64_MAX)


class RevisionIn(BaseModel):
    """A redraft: omitted fields keep the draft's value; ``attachments: []`` clears them."""

    model_config = ConfigDict(extra="forbid")
    parent_revision: int = Field(ge=1, le=INT64_MAX)
    to: Addresses | None = Field(default=None, min_length=1, max_length=100)
    cc: Addresses | None = Field(default=None, max_length=100)
    bcc: Addresses | None = Field(default=None, max_length=100)
    subject: str | None = Field(default=None, max_length=998)
    body_text: str | None = Field(default=None, max_length=MAX_BODY_TEXT)
    body_html: str | None = Field(default=None, max_length=MAX_BODY_TEXT)
    reply_to: Address | None = None
    headers: dict[str, str] | None = Field(default=None, max_length=50)
    attachments: list[AttachmentIn] | None = Field(default=None, max_length=20)
    intent: IntentIn | None = None
    confidence: float | None = Field(default=None, ge=0, le=1)
    composition_token: str | None = Field(default=None, max_length=4096)


class RestampIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parent_revision: int = Field(ge=1, le=INT64_MAX)
    composition_token: str | None = Field(default=None, max_length=4096)


class ChatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=10_000)


class OpenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    revision: int = Field(ge=1, le=INT64_MAX)
    version: int = Field(ge=1, le=INT64_MAX)


class NewRuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule_text: str = Field(min_length=1, max_length=2000)
    scope: str = Field(default="general", pattern="^(general|category)$")
    category_id: str | None = Field(default=None, max_length=40)


class DecisionIn(BaseModel):
    """The reviewer decision request of spec 000."""

    model_config = ConfigDict(extra="forbid")
    action: str = Field(pattern="^(approve|edit|reject|escalate)$")
    revision: int = Field(ge=1, le=INT64_MAX)
    version: int = Field(ge=1, le=INT64_MAX)
    subject: str | None = Field(default=None, max_length=998)
    body: str | None = Field(default=None, max_length=MAX_BODY_TEXT)
    feedback: str = Field(default="", max_length=10_000)
    new_rule: NewRuleIn | None = None


class PolicyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str = Field(max_length=32)


class AddressIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    address: Address


class InboundIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: Address = Field(alias="from")
    to: Addresses = Field(min_length=1, max_length=100)
    cc: Addresses = Field(default_factory=list, max_length=100)
    subject: str = Field(default="", max_length=998)
    body_text: str = Field(default="", max_length=MAX_BODY_TEXT)
    headers: dict[str, str] = Field(default_factory=dict, max_length=100)


# --- protobuf <-> JSON ----------------------------------------------------------------------------


def _attachments(items: list[AttachmentIn]) -> list[review_pb2.Attachment]:
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


def _set_intent(target: review_pb2.Intent, intent: IntentIn) -> None:
    target.summary = intent.summary
    target.meta_json = orjson.dumps(intent.meta).decode() if intent.meta is not None else ""


def turn_json(turn: review_pb2.Turn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": turn.id,
        "seq": turn.seq,
        "turn_type": turn.turn_type,
        "actor_kind": turn.actor_kind,
        "body": turn.body,
        "revision": turn.revision,
        "created_at": timestamp(turn.created_at),
    }
    if turn.action:
        body["action"] = turn.action
    if turn.diff_json:
        body["diff_json"] = orjson.loads(turn.diff_json)
    return body


def review_json(review: review_pb2.Review) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": review.id,
        "state": enum_name(review_pb2.ReviewState, review.state, "REVIEW_STATE_"),
        "revision": review.revision,
        "version": review.version,
        "closed": review.closed,
        "org_id": review.org_id,
        "project_id": review.project_id,
        "agent_id": review.agent_id,
        "category_id": review.category_id or None,
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
    }
    if review.HasField("intent"):
        intent: dict[str, Any] = {"summary": review.intent.summary}
        if review.intent.meta_json:
            intent["meta"] = orjson.loads(review.intent.meta_json)
        body["intent"] = intent
    for name in (
        "message_id",
        "thread_ref",
        "send_path",
        "send_error",
        "gate_outcome",
        "body_html",
        "reply_to",
        "parent_message_id",
        "confidence",
    ):
        if review.HasField(name):
            body[name] = getattr(review, name)
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
    for name in ("decided_at", "sent_at"):
        if review.HasField(name):  # type: ignore[arg-type]
            body[name] = timestamp(getattr(review, name))
    if review.turns:
        body["turns"] = [turn_json(t) for t in review.turns]
    return body


def _submitted(reply: review_pb2.SubmitResponse) -> dict[str, Any]:
    review = review_json(reply.review)
    body: dict[str, Any] = {"status": reply.status, "review_id": review["id"], "state": review["state"]}
    for name in ("message_id", "thread_ref", "send_error", "gate_outcome"):
        if name in review:
            body[name] = review[name]
    body["review"] = review
    return body


async def _submit(
    backend: Backends,
    principal: Principal,
    kind: review_pb2.MessageKind.ValueType,
    body: _Composed,
    to: list[str],
    subject: str,
    idempotency_key: str,
    parent_message_id: str = "",
) -> dict[str, Any]:
    request = review_pb2.SubmitRequest(
        principal=principal.to_proto(),
        kind=kind,
        parent_message_id=parent_message_id,
        to=to,
        cc=body.cc,
        bcc=body.bcc,
        subject=subject,
        body_text=body.body_text,
        category_id=body.category_id or "",
        idempotency_key=idempotency_key,
        headers=body.headers or {},
        attachments=_attachments(body.attachments or []),
        composition_token=body.composition_token or "",
    )
    if body.intent is not None:
        _set_intent(request.intent, body.intent)
    if body.body_html is not None:
        request.body_html = body.body_html
    if body.reply_to is not None:
        request.reply_to = body.reply_to
    if body.confidence is not None:
        request.confidence = body.confidence
    reply = await backend.review.Submit(request, timeout=backend.timeout_s)
    return _submitted(reply)


# --- the composer's plane -------------------------------------------------------------------------


@router.post("/v1/messages", status_code=202, operation_id="send_email")
async def send_email(
    body: SendIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """Submit a new outbound message; the project's review policy decides what happens to it."""
    return await _submit(
        backend, principal, review_pb2.MESSAGE_KIND_SEND, body, body.to, body.subject, idempotency_key
    )


@router.post("/v1/messages/{message_id}/reply", status_code=202, operation_id="reply_to_email")
async def reply_to_email(
    message_id: str,
    body: ReplyIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """Reply to a recorded message; its Re: subject and recipients are materialized at submit."""
    return await _submit(
        backend,
        principal,
        review_pb2.MESSAGE_KIND_REPLY,
        body,
        body.to,
        body.subject,
        idempotency_key,
        message_id,
    )


@router.post("/v1/messages/{message_id}/forward", status_code=202, operation_id="forward_email")
async def forward_email(
    message_id: str,
    body: ForwardIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """Forward a recorded message to new recipients; the quoted parent is part of the reviewed body."""
    return await _submit(
        backend,
        principal,
        review_pb2.MESSAGE_KIND_FORWARD,
        body,
        body.to,
        body.subject,
        idempotency_key,
        message_id,
    )


@router.get("/v1/reviews/{review_id}", operation_id="get_review")
async def get_review(
    review_id: str, principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> dict[str, Any]:
    reply = await backend.review.GetReview(
        review_pb2.GetReviewRequest(principal=principal.to_proto(), review_id=review_id),
        timeout=backend.timeout_s,
    )
    return review_json(reply)


_STATES = {
    review_pb2.ReviewState.Name(v).removeprefix("REVIEW_STATE_").lower(): v
    for v in review_pb2.ReviewState.values()
    if v
}


@router.get("/v1/reviews", operation_id="list_reviews")
async def list_reviews(
    principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)],
    backend: Backend,
    state: Annotated[list[str], Query()] = [],  # noqa: B006 - FastAPI reads the default, never mutates it
    agent_id: Annotated[str, Query(max_length=40)] = "",
    category_id: Annotated[str, Query(max_length=40)] = "",
    cursor: Annotated[str, Query(max_length=64)] = "",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    unknown = [s for s in state if s not in _STATES]
    if unknown:
        raise invalid("/state", f"unknown state {unknown[0]!r}; one of {', '.join(_STATES)}")
    reply = await backend.review.ListReviews(
        review_pb2.ListReviewsRequest(
            principal=principal.to_proto(),
            states=[_STATES[s] for s in state],
            agent_id=agent_id,
            category_id=category_id,
            cursor=cursor,
            limit=limit,
        ),
        timeout=backend.timeout_s,
    )
    return {"reviews": [review_json(r) for r in reply.reviews], "next_cursor": reply.next_cursor or None}


@router.post("/v1/reviews/{review_id}/revisions", operation_id="submit_revision")
async def submit_revision(
    review_id: str,
    body: RevisionIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """Redraft (bumps revision). A composition_token the rules report stale is 409 born_stale."""
    request = review_pb2.SubmitRevisionRequest(
        principal=principal.to_proto(),
        review_id=review_id,
        parent_revision=body.parent_revision,
        composition_token=body.composition_token or "",
        idempotency_key=idempotency_key,
    )
    for name in ("subject", "body_text", "body_html", "reply_to", "confidence"):
        value = getattr(body, name)
        if value is not None:
            setattr(request, name, value)
    for name in ("to", "cc", "bcc"):
        if getattr(body, name) is not None:
            getattr(request, name).addresses.extend(getattr(body, name))
    if body.headers is not None:
        request.headers.values.update(body.headers)
        request.headers.SetInParent()
    if "attachments" in body.model_fields_set:  # omitted keeps, [] clears
        request.attachments.items.extend(_attachments(body.attachments or []))
        request.attachments.SetInParent()
    if body.intent is not None:
        _set_intent(request.intent, body.intent)
    reply = await backend.review.SubmitRevision(request, timeout=backend.timeout_s)
    return review_json(reply)


@router.post("/v1/reviews/{review_id}/restamp", operation_id="restamp_review")
async def restamp_review(
    review_id: str,
    body: RestampIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """The honest "I re-read the rules and nothing needed to change"."""
    reply = await backend.review.Restamp(
        review_pb2.RestampRequest(
            principal=principal.to_proto(),
            review_id=review_id,
            parent_revision=body.parent_revision,
            composition_token=body.composition_token or "",
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return review_json(reply)


@router.post("/v1/reviews/{review_id}/cancel", operation_id="cancel_review")
async def cancel_review(
    review_id: str,
    body: CancelIn,
    principal: Annotated[Principal, Depends(COMPOSER_OR_HUMAN)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    reply = await backend.review.Cancel(
        review_pb2.CancelRequest(
            principal=principal.to_proto(),
            review_id=review_id,
            parent_revision=body.parent_revision,
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return review_json(reply)


@router.post("/v1/reviews/{review_id}/chat", operation_id="post_review_chat")
async def post_review_chat(
    review_id: str,
    body: ChatIn,
    principal: Annotated[Principal, Depends(COMPOSER_OR_HUMAN)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """An agent question or a human comment; idempotent on the Idempotency-Key header."""
    reply = await backend.review.PostChat(
        review_pb2.PostChatRequest(
            principal=principal.to_proto(),
            review_id=review_id,
            text=body.text,
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return {**review_json(reply.review), "turn": turn_json(reply.turn)}


@router.get("/v1/reviews/{review_id}/feedback", operation_id="get_review_feedback")
async def get_review_feedback(
    review_id: str, principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> dict[str, Any]:
    reply = await backend.review.GetFeedback(
        review_pb2.GetFeedbackRequest(principal=principal.to_proto(), review_id=review_id),
        timeout=backend.timeout_s,
    )
    body: dict[str, Any] = {"review_id": reply.review_id, "decision": reply.decision}
    if reply.diff_unified:
        body["diff_unified"] = reply.diff_unified
    if reply.diff_json:
        body["diff_json"] = orjson.loads(reply.diff_json)
    body["comments"] = [
        {"turn_id": c.turn_id, "actor_kind": c.actor_kind, "body": c.body} for c in reply.comments
    ]
    body["new_rules"] = list(reply.new_rules)
    return body


@router.get("/v1/review-policy", operation_id="get_effective_review_policy")
async def get_effective_review_policy(
    principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> dict[str, Any]:
    """Know before you send: the resolved policy and where it comes from."""
    reply = await backend.review.GetReviewPolicy(
        review_pb2.GetReviewPolicyRequest(principal=principal.to_proto()), timeout=backend.timeout_s
    )
    return {"policy": reply.policy, "source": reply.source}


# --- the reviewer planes --------------------------------------------------------------------------


@router.post("/v1/reviews/{review_id}/open", operation_id="open_review")
async def open_review(
    review_id: str,
    body: OpenIn,
    principal: Annotated[Principal, Depends(HUMAN)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """A human picks a draft up (needs_review -> in_review)."""
    reply = await backend.review.Open(
        review_pb2.OpenRequest(
            principal=principal.to_proto(),
            review_id=review_id,
            revision=body.revision,
            version=body.version,
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return review_json(reply)


@router.post("/v1/reviews/{review_id}/decision", operation_id="decide_review")
async def decide_review(
    review_id: str,
    body: DecisionIn,
    principal: Annotated[Principal, Depends(REVIEWER)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """approve | edit | reject | escalate with the (revision, version) CAS. A human key answers the
    review; a review_agent key answers the spec's reviewer result ``{kind: sent | sent_to_human}``."""
    request = review_pb2.DecideRequest(
        principal=principal.to_proto(),
        review_id=review_id,
        action=body.action,
        revision=body.revision,
        version=body.version,
        feedback=body.feedback,
        idempotency_key=idempotency_key,
    )
    if body.subject is not None:
        request.subject = body.subject
    if body.body is not None:
        request.body = body.body
    if body.new_rule is not None:
        request.new_rule.rule_text = body.new_rule.rule_text
        request.new_rule.scope = body.new_rule.scope
        request.new_rule.category_id = body.new_rule.category_id or ""
    if principal.actor_kind is not ActorKind.REVIEW_AGENT:
        return review_json(await backend.review.Decide(request, timeout=backend.timeout_s))
    result = await backend.review.ReviewerDecide(request, timeout=backend.timeout_s)
    answer: dict[str, Any] = {"kind": result.kind, "sent": result.sent, "sent_to_human": result.sent_to_human}
    if result.message_id:
        answer["message_id"] = result.message_id
    if result.thread_id:
        answer["thread_id"] = result.thread_id
    answer["review"] = {
        "id": result.review.id,
        "state": enum_name(review_pb2.ReviewState, result.review.state, "REVIEW_STATE_"),
        "revision": result.review.revision,
    }
    if result.forced_by_breaker:
        answer["forced_by_breaker"] = result.forced_by_breaker
    return answer


# --- the console: review policy, contacts, inbound mail -------------------------------------------


@router.put(
    "/v1/admin/projects/{project_id}/review-policy", tags=["console"], operation_id="set_review_policy"
)
async def set_review_policy(
    project_id: str, body: PolicyIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    principal = await console_principal(caller, request, project_id)
    reply = await backend.review.SetReviewPolicy(
        review_pb2.SetReviewPolicyRequest(principal=principal.to_proto(), policy=body.policy),
        timeout=backend.timeout_s,
    )
    return {"policy": reply.policy, "source": reply.source}


@router.post(
    "/v1/admin/projects/{project_id}/blocks",
    status_code=201,
    tags=["console"],
    operation_id="block_recipient",
)
async def block_recipient(
    project_id: str, body: AddressIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    principal = await console_principal(caller, request, project_id)
    reply = await backend.review.AddBlock(
        review_pb2.ContactRequest(principal=principal.to_proto(), address=body.address),
        timeout=backend.timeout_s,
    )
    return {"address": reply.address, "blocked": reply.blocked, "suppressed": reply.suppressed}


@router.post(
    "/v1/admin/projects/{project_id}/suppressions",
    status_code=201,
    tags=["console"],
    operation_id="suppress_recipient",
)
async def suppress_recipient(
    project_id: str, body: AddressIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    principal = await console_principal(caller, request, project_id)
    reply = await backend.review.AddSuppression(
        review_pb2.ContactRequest(principal=principal.to_proto(), address=body.address),
        timeout=backend.timeout_s,
    )
    return {"address": reply.address, "blocked": reply.blocked, "suppressed": reply.suppressed}


@router.post(
    "/v1/admin/projects/{project_id}/inbound",
    status_code=201,
    tags=["console"],
    operation_id="record_inbound_mail",
)
async def record_inbound_mail(
    project_id: str, body: InboundIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    """Record a received message (a provider webhook would call the same), so replies and forwards
    have a parent."""
    principal = await console_principal(caller, request, project_id)
    message = review_pb2.RecordInboundRequest(
        principal=principal.to_proto(),
        to=body.to,
        cc=body.cc,
        subject=body.subject,
        body_text=body.body_text,
        headers=body.headers,
    )
    setattr(message, "from", body.from_)
    reply = await backend.review.RecordInbound(message, timeout=backend.timeout_s)
    return {
        "message_id": reply.message_id,
        "thread_ref": reply.thread_ref,
        "rfc_message_id": reply.rfc_message_id,
    }
