"""The reviewer verbs (spec 000): list, open, decide, undo, chat, and an admin's delivery resolution."""

from __future__ import annotations

from typing import TypeVar

from fastapi import Request
from reviewloop.errors import invalid
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import (
    DeliveryResolutionIn,
    MessagePreviewIn,
    OpenIn,
    PostReviewChatRequest,
    ReviewerDecisionRequest,
    ReviewListQuery,
    UndoDecisionIn,
)
from reviewloop.tenancy import ActorKind, Principal

from gateway import escalation
from gateway.backends import Backends

R = TypeVar("R", review_pb2.OpenRequest, review_pb2.UndoDecisionRequest)


def _at(
    kind: type[R], principal: Principal, review_id: str, body: OpenIn | UndoDecisionIn, idempotency_key: str
) -> R:
    """A verb on the (revision, version) the reviewer saw."""
    return kind(
        principal=principal.to_proto(),
        review_id=review_id,
        revision=body.revision,
        version=body.version,
        idempotency_key=idempotency_key,
    )


STATES = {
    review_pb2.ReviewState.Name(v).removeprefix("REVIEW_STATE_").lower(): v
    for v in review_pb2.ReviewState.values()
    if v
}


async def get_review(backend: Backends, principal: Principal, review_id: str) -> review_pb2.Review:
    """One review, ``404`` unless the caller's project sees it."""
    request = review_pb2.GetReviewRequest(principal=principal.to_proto(), review_id=review_id)
    return await backend.review.GetReview(request, timeout=backend.timeout_s)


async def pacing_state(backend: Backends, principal: Principal, category_id: str) -> review_pb2.PacingState:
    """A category's pacing: its window, what it let through, the drafts it holds."""
    request = review_pb2.GetPacingStateRequest(principal=principal.to_proto(), category_id=category_id)
    return await backend.review.GetPacingState(request, timeout=backend.timeout_s)


async def preview_message(
    backend: Backends, principal: Principal, review_id: str, edit: MessagePreviewIn | None = None
) -> review_pb2.MessagePreview:
    """The exact message an approval (of ``edit``, when given) delivers, and its approval digest."""
    request = review_pb2.PreviewMessageRequest(principal=principal.to_proto(), review_id=review_id)
    for name in ("subject", "body", "body_html"):
        value = getattr(edit, name, None)
        if value is not None:
            setattr(request, name, value)
    return await backend.review.PreviewMessage(request, timeout=backend.timeout_s)


async def revisions(backend: Backends, principal: Principal, review_id: str) -> review_pb2.ReviewRevisions:
    """Every kept revision of a review's content, oldest first."""
    request = review_pb2.GetReviewRequest(principal=principal.to_proto(), review_id=review_id)
    return await backend.review.GetReviewRevisions(request, timeout=backend.timeout_s)


async def list_reviews(
    backend: Backends,
    principal: Principal,
    query: ReviewListQuery,
    *,
    parked: bool = False,
    with_first_contact: bool = False,
) -> review_pb2.ListReviewsResponse:
    """The reviews the query's filters keep, newest first; the console also asks for the parked sends and
    which drafts go to a first contact, which the REST route does not offer."""
    states = [name for value in query.state for name in value.split(",") if name]
    unknown = [s for s in states if s not in STATES]
    if unknown:
        raise invalid("/state", f"unknown state {unknown[0]!r}; one of {', '.join(STATES)}")
    agent_id = query.agent_id
    if query.composer:
        agent_id = principal.actor_id if query.composer == "me" else query.composer
    request = review_pb2.ListReviewsRequest(
        principal=principal.to_proto(),
        states=[STATES[s] for s in states],
        agent_id=agent_id,
        category_id=query.category_id,
        cursor=query.cursor or query.page_token,
        limit=query.limit,
        humans_notified=query.humans_notified,
        inbox=query.inbox,
        thread_id=query.thread_id,
        escalated=query.escalated,
        escalated_to=[query.escalated_to] if query.escalated_to else [],
        overdue=query.overdue,
        parked=parked,
        with_first_contact=with_first_contact,
    )
    return await backend.review.ListReviews(request, timeout=backend.timeout_s)


async def open_review(
    backend: Backends, principal: Principal, review_id: str, body: OpenIn, idempotency_key: str
) -> review_pb2.Review:
    """A human picks a draft up (needs_review -> in_review)."""
    request = _at(review_pb2.OpenRequest, principal, review_id, body, idempotency_key)
    return await backend.review.Open(request, timeout=backend.timeout_s)


async def decide(
    http: Request,
    backend: Backends,
    principal: Principal,
    review_id: str,
    body: ReviewerDecisionRequest,
    idempotency_key: str,
) -> review_pb2.Review | review_pb2.ReviewerDecision:
    """approve | edit | reject | escalate on the (revision, version) CAS: a human's decision answers the
    review, a review agent's the reviewer result. ``http`` names the console's link in an escalation."""
    # ``version`` is the optional second CAS (the SDK's "defense in depth"); ``revision`` always guards.
    # Omitted, it travels as 0 ("not named"): review_state compares the version it reads, and a keyed
    # retry of the same body is the same request (its fingerprint is what the client sent).
    request = review_pb2.DecideRequest(
        principal=principal.to_proto(),
        review_id=review_id,
        action=body.action,
        revision=body.revision,
        version=body.version or 0,
        feedback=body.feedback,
        idempotency_key=idempotency_key,
        message_sha256=body.message_sha256 or "",
        override_held=body.override_held,
    )
    for name in ("body_html", "subject", "body"):  # an edit's message; omitted, each is the draft's
        if getattr(body, name) is not None:
            setattr(request, name, getattr(body, name))
    if body.escalate_to is not None or body.escalation_deadline is not None or body.action == "escalate":
        target = body.escalate_to
        await escalation.fill(
            http,
            principal,
            request,
            kind=target.kind if target else "",
            target_id=target.id if target else "",
            deadline=body.escalation_deadline,
        )
    if body.new_rule is not None:
        request.new_rule.rule_text = body.new_rule.rule_text
        request.new_rule.scope = body.new_rule.scope
        request.new_rule.category_id = body.new_rule.category_id or ""
        request.new_rule.rule_layer = body.new_rule.rule_layer
        request.new_rule.scope_agent_id = body.new_rule.scope_agent_id or ""
    if principal.actor_kind is ActorKind.REVIEW_AGENT:
        return await backend.review.ReviewerDecide(request, timeout=backend.timeout_s)
    return await backend.review.Decide(request, timeout=backend.timeout_s)


async def undo_decision(
    backend: Backends, principal: Principal, review_id: str, body: UndoDecisionIn, idempotency_key: str
) -> review_pb2.Review:
    """The decider takes back its approve or edit while the release waits out its undo window."""
    request = _at(review_pb2.UndoDecisionRequest, principal, review_id, body, idempotency_key)
    return await backend.review.UndoDecision(request, timeout=backend.timeout_s)


async def post_chat(
    backend: Backends, principal: Principal, review_id: str, body: PostReviewChatRequest, idempotency_key: str
) -> review_pb2.PostChatResponse:
    """An agent question or a human comment on the review thread."""
    return await backend.review.PostChat(
        review_pb2.PostChatRequest(
            principal=principal.to_proto(),
            review_id=review_id,
            text=body.text,
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )


async def resolve_delivery(
    backend: Backends, principal: Principal, review_id: str, body: DeliveryResolutionIn
) -> review_pb2.Review:
    """An admin closes a parked delivery as delivered or failed, by its evidence (never a resend)."""
    return await backend.review.ResolveDelivery(
        review_pb2.ResolveDeliveryRequest(
            principal=principal.to_proto(), review_id=review_id, outcome=body.outcome, reason=body.reason
        ),
        timeout=backend.timeout_s,
    )
