"""The review routes of spec 000: the composer's plane and the reviewer planes. Each route's operation_id is
the spec's verb. (The console's review policy, contacts and inbound mail are in ``routes/admin/reviews``.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

import grpc
from fastapi import APIRouter, Depends, Query, Request
from reviewloop.errors import invalid
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import (
    CancelIn,
    ForwardIn,
    MessagePreview,
    MessagePreviewIn,
    OpenIn,
    PostReviewChatRequest,
    ReplyIn,
    RestampReviewRequest,
    Review,
    ReviewChatResult,
    ReviewDecisionContext,
    ReviewerDecisionRequest,
    ReviewerDecisionResult,
    ReviewFeedback,
    ReviewList,
    ReviewListQuery,
    ReviewPolicy,
    ReviewTurnList,
    SendIn,
    SubmitForReviewResult,
    SubmitRevisionRequest,
    Thread,
    ThreadReplyIn,
)
from reviewloop.tenancy import ActorKind, Principal

from gateway.auth import AGENT, ANY_PROJECT_KEY, COMPOSER_OR_HUMAN, require
from gateway.backends import Backends, backends
from gateway.commands import admin as admin_commands
from gateway.commands import budget as budget_commands
from gateway.commands import reviews as commands
from gateway.headers import IdempotencyKey
from gateway.problems import refused_send
from gateway.responses import OrjsonResponse, ShapedRoute, encoded
from gateway.translate import Json, page, timestamp
from gateway.translate.reviews import (
    as_message_preview,
    as_review,
    as_review_chat_result,
    as_review_feedback,
    as_review_policy,
    as_review_turn,
    as_reviewer_decision_result,
    as_submit_result,
    attachments,
    set_intent,
)

router = APIRouter(tags=["reviews"], route_class=ShapedRoute)

Backend = Annotated[Backends, Depends(backends)]
HUMAN = require(ActorKind.HUMAN, ActorKind.ADMIN)
REVIEWER = require(ActorKind.HUMAN, ActorKind.ADMIN, ActorKind.REVIEW_AGENT)


async def _submit(
    backend: Backends,
    principal: Principal,
    kind: review_pb2.MessageKind.ValueType,
    body: SendIn | ThreadReplyIn | ForwardIn,
    idempotency_key: str,
    parent_message_id: str = "",
    thread_id: str = "",
) -> OrjsonResponse:
    request = review_pb2.SubmitRequest(
        principal=principal.to_proto(),
        kind=kind,
        parent_message_id=parent_message_id,
        to=body.to,
        cc=body.cc,
        bcc=body.bcc,
        subject=body.subject,
        body_text=body.body_text,
        category_id=body.category_id or "",
        idempotency_key=idempotency_key,
        headers=body.headers or {},
        attachments=attachments(body.attachments or []),
        composition_token=body.composition_token or "",
        mode=body.mode or "",
        inbox=body.inbox or "",
        thread_id=thread_id,
    )
    if isinstance(body, ThreadReplyIn):
        request.reply_all = body.reply_all
        request.expected_context_version = body.expected_context_version or ""
        request.expected_last_message_id = body.expected_last_message_id or ""
        request.second_reply = body.second_reply
    if body.intent is not None:
        set_intent(request.intent, body.intent)
    if body.body_html is not None:
        request.body_html = body.body_html
    if body.reply_to is not None:
        request.reply_to = body.reply_to
    if body.confidence is not None:
        request.confidence = body.confidence
    try:
        reply = await backend.review.Submit(request, timeout=backend.timeout_s)
    except grpc.aio.AioRpcError as exc:
        raise refused_send(exc, body.body_text) from exc
    return encoded(as_submit_result(reply), status_code=202)


# --- the composer's plane -------------------------------------------------------------------------


@router.post("/v1/messages", status_code=202, operation_id="send_email", response_model=SubmitForReviewResult)
async def send_email(
    body: SendIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """Submit a new outbound message; the project's review policy decides what happens to it."""
    return await _submit(backend, principal, review_pb2.MESSAGE_KIND_SEND, body, idempotency_key)


@router.post(
    "/v1/messages/{message_id}/reply",
    status_code=202,
    operation_id="reply_to_email",
    response_model=SubmitForReviewResult,
)
async def reply_to_email(
    message_id: str,
    body: ReplyIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """Reply to a recorded message; its Re: subject and recipients are materialized at submit."""
    return await _submit(
        backend,
        principal,
        review_pb2.MESSAGE_KIND_REPLY,
        body,
        idempotency_key,
        message_id,
        body.thread_id or "",
    )


@router.get("/v1/threads/{thread_id}", operation_id="get_thread", response_model=Thread)
async def get_thread(
    thread_id: str, principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> Json:
    """What a thread is now: read it before composing a reply, and name its ``context_version`` and
    ``last_message_id`` as the reply's ``expected_*`` (a thread that moved since is refused)."""
    thread = await backend.review.GetThread(
        review_pb2.GetThreadRequest(principal=principal.to_proto(), thread_id=thread_id),
        timeout=backend.timeout_s,
    )
    return {
        "thread_id": thread.thread_id,
        "context_version": thread.context_version,
        "last_message_id": thread.last_message_id,
    }


@router.post(
    "/v1/threads/{thread_id}/reply",
    status_code=202,
    operation_id="reply_to_thread",
    response_model=SubmitForReviewResult,
)
async def reply_to_thread(
    thread_id: str,
    body: ThreadReplyIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """Reply to a thread's newest message (the catalog's ``reply_email`` with ``thread_id``)."""
    return await _submit(
        backend, principal, review_pb2.MESSAGE_KIND_REPLY, body, idempotency_key, thread_id=thread_id
    )


@router.post(
    "/v1/messages/{message_id}/forward",
    status_code=202,
    operation_id="forward_email",
    response_model=SubmitForReviewResult,
)
async def forward_email(
    message_id: str,
    body: ForwardIn,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """Forward a recorded message to new recipients; the quoted parent is part of the reviewed body."""
    return await _submit(
        backend, principal, review_pb2.MESSAGE_KIND_FORWARD, body, idempotency_key, message_id
    )


async def _current(backend: Backends, principal: Principal, review_id: str) -> review_pb2.Review:
    return await commands.get_review(backend, principal, review_id)


async def _reviewed(
    backend: Backends, principal: Principal, review_id: str
) -> tuple[review_pb2.Review, Json]:
    """The review and its answer, with the approval digest of the message an approval delivers now (read
    beside it: a decision names the digest, so a reader needs no third call before deciding)."""
    review, preview = await asyncio.gather(
        _current(backend, principal, review_id), commands.preview_message(backend, principal, review_id)
    )
    body = as_review(review)
    body["message_sha256"] = preview.message_sha256
    return review, body


@router.get("/v1/reviews/{review_id}", operation_id="get_review", response_model=Review)
async def get_review(
    review_id: str, principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> OrjsonResponse:
    """The review, its thread, and ``message_sha256``: the approval digest a decision names."""
    return encoded((await _reviewed(backend, principal, review_id))[1])


@router.post(
    "/v1/reviews/{review_id}/preview", operation_id="preview_review_message", response_model=MessagePreview
)
async def preview_review_message(
    review_id: str,
    body: MessagePreviewIn,
    principal: Annotated[Principal, Depends(REVIEWER)],
    backend: Backend,
) -> OrjsonResponse:
    """The exact message an approval delivers (every part, as MIME) and its approval digest; with a
    proposed edit (``subject``, ``body``, ``body_html``), the message that edit would deliver. Nothing is
    written: name the digest in ``decide_review``'s ``message_sha256``."""
    return encoded(
        as_message_preview(review_id, await commands.preview_message(backend, principal, review_id, body))
    )


@router.get("/v1/reviews/{review_id}/turns", operation_id="get_review_turns", response_model=ReviewTurnList)
async def get_review_turns(
    review_id: str, principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> OrjsonResponse:
    """The review's append-only thread, oldest first (the catalog's ``get_review_turns``)."""
    return encoded(page([as_review_turn(t) for t in (await _current(backend, principal, review_id)).turns]))


HELD_BY = "held:"  # the gate_outcome of a review agent's release a circuit breaker held for a human
MAX_HOPS_REACHED, REVIEW_DEADLINE_PASSED = "max_hops_reached", "review_deadline_passed"


async def _round_budget(backend: Backends, principal: Principal, review_id: str) -> tuple[int, int | None]:
    """(review-agent rounds spent, their limit): dispatch_budget admits and bounds them (its run is the
    review). Before the first round there is no run, so no limit to read (it is set at the first)."""
    try:
        budget = await budget_commands.round_budget(backend, principal, review_id)
    except grpc.aio.AioRpcError as error:
        if error.code() is not grpc.StatusCode.NOT_FOUND:
            raise
        return 0, None
    return budget.used, budget.limit


@router.get(
    "/v1/reviews/{review_id}/decision-context",
    operation_id="get_review_decision_context",
    response_model=ReviewDecisionContext,
)
async def get_review_decision_context(
    review_id: str, principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> OrjsonResponse:
    """What a reviewer weighs before deciding (the catalog's ``get_review_decision_context``): the review
    and its thread (one read), the review-agent rounds (hops) spent and allowed, the deadline, and whether
    a breaker forces the next decision to a human and why."""
    (review, body), (hops, max_hops) = await asyncio.gather(
        _reviewed(backend, principal, review_id), _round_budget(backend, principal, review_id)
    )
    hops_exhausted = max_hops is not None and hops >= max_hops
    # The deadline bounds a draft still awaiting its decision; a closed review has none left to force.
    deadline_passed = (
        not review.closed
        and review.HasField("review_deadline")
        and review.review_deadline.ToDatetime(tzinfo=UTC) <= datetime.now(UTC)
    )
    held = review.gate_outcome.removeprefix(HELD_BY) if review.gate_outcome.startswith(HELD_BY) else None
    hops_exhausted |= held == MAX_HOPS_REACHED
    deadline_passed |= held == REVIEW_DEADLINE_PASSED
    # A breaker's hold names itself; else the breaker that has tripped (the next decision is forced).
    reason = held or (
        MAX_HOPS_REACHED if hops_exhausted else REVIEW_DEADLINE_PASSED if deadline_passed else None
    )
    context: Json = {
        "review_id": review.id,
        "review": body,
        "turns": body.pop("turns", []),
        "hop_count": hops,
        "max_hops": max_hops,
        "review_deadline": timestamp(review.review_deadline) if review.HasField("review_deadline") else None,
        "deadline_passed": deadline_passed,
        "hops_exhausted": hops_exhausted,
        "force_to_human": reason is not None,
    }
    if reason is not None:  # the SDK's optional string: absent, never null
        context["force_reason"] = reason
    return encoded(context)


@router.get("/v1/reviews", operation_id="list_reviews", response_model=ReviewList)
async def list_reviews(
    principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)],
    backend: Backend,
    query: Annotated[ReviewListQuery, Query()],
) -> OrjsonResponse:
    """Repeated ``state=`` (the spec) and comma-joined ``state=a,b`` (the SDK) both filter."""
    reply = await commands.list_reviews(backend, principal, query)
    return encoded(page([as_review(r) for r in reply.reviews], reply.next_cursor, reply.total))


@router.post("/v1/reviews/{review_id}/revisions", operation_id="submit_revision", response_model=Review)
async def submit_revision(
    review_id: str,
    body: SubmitRevisionRequest,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """Redraft (bumps revision). A composition_token the rules report stale is 409 born_stale."""
    request = review_pb2.SubmitRevisionRequest(
        principal=principal.to_proto(),
        review_id=review_id,
        parent_revision=body.parent_revision,
        composition_token=body.composition_token or "",
        idempotency_key=idempotency_key,
    )
    if body.version is not None:
        request.expected_version = body.version
    if body.rules_version_seen is not None:
        request.rules_version_seen = body.rules_version_seen
    if body.recheck_through_seq is not None:
        request.recheck_through_seq = body.recheck_through_seq
        await _check_nudge_seq(backend, principal, review_id, body.recheck_through_seq)
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
        request.attachments.items.extend(attachments(body.attachments or []))
        request.attachments.SetInParent()
    if body.intent is not None:
        set_intent(request.intent, body.intent)
    reply = await backend.review.SubmitRevision(request, timeout=backend.timeout_s)
    return encoded(as_review(reply))


@router.post("/v1/reviews/{review_id}/restamp", operation_id="restamp_review", response_model=Review)
async def restamp_review(
    review_id: str,
    body: RestampReviewRequest,
    principal: Annotated[Principal, Depends(AGENT)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """The honest "I re-read the rules and nothing needed to change". Without ``parent_revision`` (the SDK
    and catalog send ``expected_version`` instead, or nothing) the current revision is the one restamped."""
    request = review_pb2.RestampRequest(
        principal=principal.to_proto(),
        review_id=review_id,
        parent_revision=body.parent_revision or (await _current(backend, principal, review_id)).revision,
        composition_token=body.composition_token or "",
        idempotency_key=idempotency_key,
    )
    for name in ("expected_version", "against_version", "house_style_version", "recheck_through_seq"):
        if getattr(body, name) is not None:
            setattr(request, name, getattr(body, name))
    if body.recheck_through_seq is not None:
        await _check_nudge_seq(backend, principal, review_id, body.recheck_through_seq)
    return encoded(as_review(await backend.review.Restamp(request, timeout=backend.timeout_s)))


async def _check_nudge_seq(backend: Backends, principal: Principal, review_id: str, seq: int) -> None:
    """A recheck may only claim nudges the review has: the nudge service numbers them (``last_seq``)."""
    reply = await backend.nudge.ListEvents(
        nudge_pb2.ListEventsRequest(principal=principal.to_proto(), review_id=review_id, limit=1),
        timeout=backend.timeout_s,
    )
    last = max((c.last_seq for c in reply.cursors if c.review_id == review_id), default=0)
    if seq > last:
        raise invalid(
            "/recheck_through_seq",
            f"names seq {seq}, but the review's newest nudge is seq {last}; name a seq you handled",
        )


@router.post("/v1/reviews/{review_id}/cancel", operation_id="cancel_review", response_model=Review)
async def cancel_review(
    review_id: str,
    body: CancelIn,
    principal: Annotated[Principal, Depends(COMPOSER_OR_HUMAN)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """Withdraw the draft. Without ``parent_revision`` (the SDK and catalog send none) the current
    revision is the one withdrawn."""
    parent_revision = body.parent_revision or (await _current(backend, principal, review_id)).revision
    reply = await backend.review.Cancel(
        review_pb2.CancelRequest(
            principal=principal.to_proto(),
            review_id=review_id,
            parent_revision=parent_revision,
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return encoded(as_review(reply))


@router.post("/v1/reviews/{review_id}/chat", operation_id="post_review_chat", response_model=ReviewChatResult)
async def post_review_chat(
    review_id: str,
    body: PostReviewChatRequest,
    principal: Annotated[Principal, Depends(COMPOSER_OR_HUMAN)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """An agent question or a human comment; idempotent on the Idempotency-Key header."""
    reply = await commands.post_chat(backend, principal, review_id, body, idempotency_key)
    return encoded(as_review_chat_result(reply))


@router.get(
    "/v1/reviews/{review_id}/feedback", operation_id="get_review_feedback", response_model=ReviewFeedback
)
async def get_review_feedback(
    review_id: str, principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> Json:
    reply = await backend.review.GetFeedback(
        review_pb2.GetFeedbackRequest(principal=principal.to_proto(), review_id=review_id),
        timeout=backend.timeout_s,
    )
    return as_review_feedback(reply)


@router.get("/v1/review-policy", operation_id="get_effective_review_policy", response_model=ReviewPolicy)
async def get_effective_review_policy(
    principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)], backend: Backend
) -> Json:
    """Know before you send: the resolved policy and where it comes from."""
    reply = await admin_commands.review_policy(backend, principal)
    return as_review_policy(reply)


# --- the reviewer planes --------------------------------------------------------------------------


@router.post("/v1/reviews/{review_id}/open", operation_id="open_review", response_model=Review)
async def open_review(
    review_id: str,
    body: OpenIn,
    principal: Annotated[Principal, Depends(HUMAN)],
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> OrjsonResponse:
    """A human picks a draft up (needs_review -> in_review)."""
    reply = await commands.open_review(backend, principal, review_id, body, idempotency_key)
    return encoded(as_review(reply))


@router.post(
    "/v1/reviews/{review_id}/decision",
    operation_id="decide_review",
    response_model=Review | ReviewerDecisionResult,
)
async def decide_review(
    review_id: str,
    body: ReviewerDecisionRequest,
    principal: Annotated[Principal, Depends(REVIEWER)],
    backend: Backend,
    http: Request,
    idempotency_key: IdempotencyKey = "",
) -> Any:
    """approve | edit | reject | escalate with the (revision, version) CAS; ``message_sha256`` names the
    message the decider saw (refused 409 stale when an approve or edit would deliver another), and a human's
    ``override_held`` approves a draft a rule holds as it stands. A human key answers the
    review; a review_agent key answers the spec's reviewer result ``{kind: sent | sent_to_human}``, a
    release's ``delivery_status`` beside it (``sent`` is true once it is ``delivered``)."""
    reply = await commands.decide(http, backend, principal, review_id, body, idempotency_key)
    if isinstance(reply, review_pb2.ReviewerDecision):
        return as_reviewer_decision_result(reply)
    return encoded(as_review(reply))
