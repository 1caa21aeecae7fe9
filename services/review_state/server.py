"""The ReviewStateService servicer: translate protobuf, call ``app``, return protobuf."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import grpc
import orjson
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.protoconv import enum_name, required_enum, stamp
from reviewloop.records import from_row
from reviewloop.review.v1 import review_pb2, review_pb2_grpc
from reviewloop.service import Registration
from reviewloop.tenancy import Principal

from review_state import app
from review_state.app import Env, Revision
from review_state.app.dial_effect import GATE_FIELDS
from review_state.domain import dial_effect
from review_state.domain.escalation import mine
from review_state.domain.machine import State
from review_state.domain.review import Review
from review_state.domain.submission import Asked, Dial, Draft
from review_state.messages import (
    KIND_PREFIX,
    STATE_PREFIX,
    attachments_from_proto,
    contact_to_proto,
    decision_from_proto,
    intent_from_proto,
    optional_field,
    review_to_proto,
    state_to_proto,
    turn_to_proto,
    with_undo_until,
)

if TYPE_CHECKING:
    Context = grpc.aio.ServicerContext[Any, Any]


class ReviewStateServicer(review_pb2_grpc.ReviewStateServiceServicer):
    def __init__(self, env: Env) -> None:
        self.env = env

    async def Submit(self, request: review_pb2.SubmitRequest, context: Context) -> review_pb2.SubmitResponse:
        kind = enum_name(review_pb2.MessageKind, KIND_PREFIX, request.kind)
        if not kind:
            raise DomainError(Code.BAD_REQUEST, "kind must be send, reply or forward.")
        draft = Draft(
            to=list(request.to),
            cc=list(request.cc),
            bcc=list(request.bcc),
            subject=request.subject,
            body_text=request.body_text,
            intent=intent_from_proto(request.intent, request.HasField("intent")),
            body_html=optional_field(request, "body_html"),
            reply_to=optional_field(request, "reply_to"),
            headers=dict(request.headers),
            attachments=attachments_from_proto(request.attachments),
        )
        asked = app.SubmitRequest(
            kind=kind,
            draft=draft,
            category_id=request.category_id,
            idempotency_key=request.idempotency_key,
            parent_message_id=request.parent_message_id,
            confidence=optional_field(request, "confidence"),
            composition_token=request.composition_token,
            # Each of Asked's fields is the request's field of its name.
            asked=from_row(Asked, request),
        )
        status, review = await app.submit(self.env, Principal.from_proto(request.principal), asked)
        message_id = review.message_id or ""
        if status == "sent" and not message_id:  # released, its delivery outlasting the wait: still named
            attempt = await app.get_delivery(self.env, Principal.from_proto(request.principal), review.id)
            message_id = attempt.message_id if attempt is not None else ""
        return review_pb2.SubmitResponse(status=status, review=review_to_proto(review), message_id=message_id)

    async def GetReview(self, request: review_pb2.GetReviewRequest, context: Context) -> review_pb2.Review:
        principal = Principal.from_proto(request.principal)
        return review_to_proto(*await app.read_review(self.env, principal, request.review_id))

    async def GetReviewRevisions(
        self, request: review_pb2.GetReviewRequest, context: Context
    ) -> review_pb2.ReviewRevisions:
        revisions = await app.get_revisions(
            self.env, Principal.from_proto(request.principal), request.review_id
        )
        return review_pb2.ReviewRevisions(
            review_id=request.review_id,
            revisions=[
                review_pb2.ReviewRevision(
                    revision=r.revision,
                    subject=r.subject,
                    to=r.to,
                    cc=r.cc,
                    bcc=r.bcc,
                    body_text=r.body_text,
                    body_html=r.body_html,
                    attachments=[
                        review_pb2.RevisionAttachment(filename=a.filename, size=a.size, sha256=a.sha256)
                        for a in r.attachments
                    ],
                    created_at=stamp(r.created_at),
                )
                for r in revisions
            ],
        )

    async def ResolveDelivery(
        self, request: review_pb2.ResolveDeliveryRequest, context: Context
    ) -> review_pb2.Review:
        principal = Principal.from_proto(request.principal)
        review = await app.resolve_delivery(
            self.env, principal, request.review_id, request.outcome, request.reason
        )
        return review_to_proto(review, (), await app.get_delivery(self.env, principal, review.id))

    async def ListReviews(
        self, request: review_pb2.ListReviewsRequest, context: Context
    ) -> review_pb2.ListReviewsResponse:
        principal = Principal.from_proto(request.principal)
        filters = app.ReviewFilter(
            states=tuple(
                required_enum(review_pb2.ReviewState, STATE_PREFIX, s, "/states") for s in request.states
            ),
            agent_id=request.agent_id,
            category_id=request.category_id,
            humans_notified=request.humans_notified,
            inbox=request.inbox,
            thread_id=request.thread_id,
            parked=request.parked,
            escalated=request.escalated,
            escalated_to=tuple(
                t
                for target in request.escalated_to
                for t in (
                    mine(principal.actor_id, principal.actor_kind.value) if target == "me" else (target,)
                )
            ),
            overdue=request.overdue,
        )
        (reviews, next_cursor), total = await asyncio.gather(
            app.list_reviews(self.env, principal, filters, cursor=request.cursor, limit=request.limit),
            app.count_reviews(self.env, principal, filters),
        )
        first = (
            await app.first_contacts(self.env, principal, reviews) if request.with_first_contact else set()
        )
        return review_pb2.ListReviewsResponse(
            reviews=[review_to_proto(r) for r in reviews],
            next_cursor=next_cursor,
            total=total,
            first_contact_review_ids=[r.id for r in reviews if r.id in first],
        )

    async def GetThread(self, request: review_pb2.GetThreadRequest, context: Context) -> review_pb2.Thread:
        thread = await app.get_thread(self.env, Principal.from_proto(request.principal), request.thread_id)
        return review_pb2.Thread(
            thread_id=thread.thread_id,
            context_version=thread.context_version,
            last_message_id=thread.last_message_id,
        )

    async def PreviewMessage(
        self, request: review_pb2.PreviewMessageRequest, context: Context
    ) -> review_pb2.MessagePreview:
        preview = await app.preview_message(
            self.env,
            Principal.from_proto(request.principal),
            request.review_id,
            optional_field(request, "subject"),
            optional_field(request, "body"),
            optional_field(request, "body_html"),
        )
        review = preview.review
        return review_pb2.MessagePreview(
            raw_mime=preview.raw,
            message_sha256=preview.digest,
            subject=review.subject,
            body_text=review.body_text,
            body_html=review.body_html or "",
            html_regenerated=preview.html_regenerated,
            revision=review.revision,
            version=review.version,
        )

    async def GetPacingState(
        self, request: review_pb2.GetPacingStateRequest, context: Context
    ) -> review_pb2.PacingState:
        state = await app.pacing_state(self.env, Principal.from_proto(request.principal), request.category_id)
        reply = review_pb2.PacingState(
            category_id=state.category_id,
            rule_high_water=state.rule_high_water,
            next_review_ids=state.next_review_ids,
            human_cursor_review_id=state.cursor_review_id,
            human_cursor_advanced_count=state.cursor_advanced_count,
            drafts=[
                review_pb2.PacedDraft(
                    review_id=review.id,
                    pacing="current"
                    if stale is None
                    else "stale"
                    if stale.nudged_at is None
                    else "in_flight",
                    state=state_to_proto(review.state),
                    rule_high_water=review.rule_high_water,
                    required_high_water=stale.required_high_water if stale is not None else 0,
                    rule_snapshot_unnamed=review.rule_snapshot_unnamed,
                    nudged_at=stamp(stale.nudged_at) if stale is not None and stale.nudged_at else None,
                    rule_text=str(stale.rule.get("rule_text", "")) if stale is not None else "",
                )
                for review, stale in state.drafts
            ],
        )
        if state.window is not None:
            reply.cursor_review_id = state.window.cursor_review_id
            reply.cursor_advanced_count = state.window.cursor_advanced_count
            if state.window.last_nudged_at is not None:
                reply.last_nudged_at.CopyFrom(stamp(state.window.last_nudged_at))
        return reply

    async def GetDialEffect(
        self, request: review_pb2.GetDialEffectRequest, context: Context
    ) -> review_pb2.DialEffect:
        proposed = {
            name: value for name in GATE_FIELDS if (value := optional_field(request, name)) is not None
        }
        found = await app.get_dial_effect(
            self.env, Principal.from_proto(request.principal), request.category_id, proposed, request.last
        )

        def outcome(dial: Dial, effect: dial_effect.Effect) -> review_pb2.DialOutcome:
            return review_pb2.DialOutcome(
                dial=review_pb2.GateDial(**{name: getattr(dial, name) for name in GATE_FIELDS}),
                auto_sent=effect.auto_sent,
                held=effect.held,
            )

        return review_pb2.DialEffect(
            category_id=found.category_id,
            considered=found.current.considered,
            current=outcome(found.current_dial, found.current),
            proposed=outcome(found.proposed_dial, found.proposed),
            decided=found.record.decided,
            clean_streak=found.record.clean_streak,
            edit_rate=found.record.edit_rate,
        )

    async def Cancel(self, request: review_pb2.CancelRequest, context: Context) -> review_pb2.Review:
        review = await app.cancel(
            self.env,
            Principal.from_proto(request.principal),
            request.review_id,
            request.parent_revision,
            request.idempotency_key,
        )
        return review_to_proto(review)

    async def SubmitRevision(
        self, request: review_pb2.SubmitRevisionRequest, context: Context
    ) -> review_pb2.Review:
        def addresses(name: Literal["to", "cc", "bcc"]) -> list[str] | None:
            return list(getattr(request, name).addresses) if request.HasField(name) else None

        revision = Revision(
            subject=optional_field(request, "subject"),
            body_text=optional_field(request, "body_text"),
            body_html=optional_field(request, "body_html"),
            to=addresses("to"),
            cc=addresses("cc"),
            bcc=addresses("bcc"),
            reply_to=optional_field(request, "reply_to"),
            headers=dict(request.headers.values) if request.HasField("headers") else None,
            attachments=attachments_from_proto(request.attachments.items)
            if request.HasField("attachments")
            else None,
            intent=intent_from_proto(request.intent, request.HasField("intent")),
            confidence=optional_field(request, "confidence"),
        )
        asked = app.SubmitRevisionRequest(
            request.review_id,
            request.parent_revision,
            revision,
            composition_token=request.composition_token,
            expected_version=optional_field(request, "expected_version"),
            rules_version_seen=optional_field(request, "rules_version_seen"),
            recheck_through_seq=optional_field(request, "recheck_through_seq"),
            idempotency_key=request.idempotency_key,
        )
        review = await app.submit_revision(self.env, Principal.from_proto(request.principal), asked)
        return review_to_proto(review)

    async def Restamp(self, request: review_pb2.RestampRequest, context: Context) -> review_pb2.Review:
        asked = app.RestampRequest(
            request.review_id,
            request.parent_revision,
            composition_token=request.composition_token,
            expected_version=optional_field(request, "expected_version"),
            against_version=optional_field(request, "against_version"),
            house_style_version=optional_field(request, "house_style_version"),
            recheck_through_seq=optional_field(request, "recheck_through_seq"),
            idempotency_key=request.idempotency_key,
        )
        review = await app.restamp(self.env, Principal.from_proto(request.principal), asked)
        return review_to_proto(review)

    async def PostChat(
        self, request: review_pb2.PostChatRequest, context: Context
    ) -> review_pb2.PostChatResponse:
        review, turn = await app.post_chat(
            self.env,
            Principal.from_proto(request.principal),
            request.review_id,
            request.text,
            request.idempotency_key,
        )
        return review_pb2.PostChatResponse(review=review_to_proto(review), turn=turn_to_proto(turn))

    async def Open(self, request: review_pb2.OpenRequest, context: Context) -> review_pb2.Review:
        review = await app.open_review(
            self.env,
            Principal.from_proto(request.principal),
            request.review_id,
            request.revision,
            request.version,
            request.idempotency_key,
        )
        return review_to_proto(review)

    async def Decide(self, request: review_pb2.DecideRequest, context: Context) -> review_pb2.Review:
        review = await app.decide(
            self.env,
            Principal.from_proto(request.principal),
            request.review_id,
            decision_from_proto(request),
            request.idempotency_key,
        )
        return await self._released(request.principal, review)

    async def UndoDecision(
        self, request: review_pb2.UndoDecisionRequest, context: Context
    ) -> review_pb2.Review:
        review = await app.undo_decision(
            self.env,
            Principal.from_proto(request.principal),
            request.review_id,
            request.revision,
            request.version,
            request.idempotency_key,
        )
        return review_to_proto(review)

    async def _released(self, principal: common_pb2.Principal, review: Review) -> review_pb2.Review:
        """A decision's answer: the review, and until when its release may be undone (one read more, only
        for a release still going)."""
        message = review_to_proto(review)
        if review.state is State.APPROVED:
            with_undo_until(
                message, await app.get_delivery(self.env, Principal.from_proto(principal), review.id)
            )
        return message

    async def ReviewerDecide(
        self, request: review_pb2.DecideRequest, context: Context
    ) -> review_pb2.ReviewerDecision:
        result = await app.reviewer_decide(
            self.env,
            Principal.from_proto(request.principal),
            request.review_id,
            decision_from_proto(request),
            request.idempotency_key,
        )
        review = result.review
        return review_pb2.ReviewerDecision(
            kind=result.kind,
            sent=review.state in (State.SENT, State.AUTO_SENT),
            sent_to_human=result.kind == "sent_to_human",
            message_id=review.message_id or "",
            thread_id=review.thread_ref or "",
            review=review_pb2.ReviewSummary(
                id=review.id, state=state_to_proto(review.state), revision=review.revision
            ),
            forced_by_breaker=result.forced_by_breaker,
            full_review=review_to_proto(review),
        )

    async def GetFeedback(
        self, request: review_pb2.GetFeedbackRequest, context: Context
    ) -> review_pb2.Feedback:
        feedback = await app.get_feedback(
            self.env, Principal.from_proto(request.principal), request.review_id
        )
        return review_pb2.Feedback(
            review_id=feedback.review_id,
            decision=feedback.decision,
            diff_unified=feedback.diff_unified,
            diff_json=orjson.dumps(feedback.diff_json).decode() if feedback.diff_json is not None else "",
            comments=[
                review_pb2.Comment(
                    turn_id=t.id,
                    actor_kind=t.actor_kind,
                    body=t.body,
                    actor_id=t.actor_id,
                    created_at=stamp(t.created_at),
                )
                for t in feedback.comments
            ],
            new_rules=feedback.new_rules,
            approvers=feedback.approvers,
        )

    async def RecordInbound(
        self, request: review_pb2.RecordInboundRequest, context: Context
    ) -> review_pb2.InboundMessage:
        message = await app.record_inbound(
            self.env,
            Principal.from_proto(request.principal),
            from_address=getattr(request, "from"),
            to=list(request.to),
            cc=list(request.cc),
            subject=request.subject,
            body_text=request.body_text,
            headers=dict(request.headers),
        )
        return review_pb2.InboundMessage(
            message_id=message.id, thread_ref=message.thread_ref, rfc_message_id=message.rfc_message_id
        )

    async def GetReviewPolicy(
        self, request: review_pb2.GetReviewPolicyRequest, context: Context
    ) -> review_pb2.ReviewPolicy:
        principal = Principal.from_proto(request.principal)
        (policy, source, override, account_default), required = await asyncio.gather(
            app.get_policy(self.env, principal), app.require_composition_token(self.env, principal)
        )
        return review_pb2.ReviewPolicy(
            policy=policy,
            source=source,
            project_override=override,
            account_default=account_default,
            require_composition_token=required,
        )

    async def SetReviewPolicy(
        self, request: review_pb2.SetReviewPolicyRequest, context: Context
    ) -> review_pb2.ReviewPolicy:
        principal = Principal.from_proto(request.principal)
        if request.HasField("require_composition_token"):
            required = await app.set_require_composition_token(
                self.env, principal, request.require_composition_token
            )
            if not request.policy:  # the composition setting alone: the policy stays as it is
                policy, source, _, _ = await app.get_policy(self.env, principal)
                return review_pb2.ReviewPolicy(
                    policy=policy, source=source, require_composition_token=required
                )
        set_policy = app.set_account_policy if request.account_default else app.set_policy
        policy, source = await set_policy(self.env, principal, request.policy)
        return review_pb2.ReviewPolicy(
            policy=policy,
            source=source,
            require_composition_token=await app.require_composition_token(self.env, principal),
        )

    async def AddBlock(self, request: review_pb2.ContactRequest, context: Context) -> review_pb2.Contact:
        contact = await app.add_block(self.env, Principal.from_proto(request.principal), request.address)
        return contact_to_proto(contact)

    async def AddSuppression(
        self, request: review_pb2.ContactRequest, context: Context
    ) -> review_pb2.Contact:
        contact = await app.add_suppression(
            self.env, Principal.from_proto(request.principal), request.address
        )
        return contact_to_proto(contact)

    async def ListContacts(
        self, request: review_pb2.ListContactsRequest, context: Context
    ) -> review_pb2.ListContactsResponse:
        contacts = await app.list_contacts(self.env, Principal.from_proto(request.principal))
        return review_pb2.ListContactsResponse(contacts=[contact_to_proto(c) for c in contacts])

    async def RemoveBlock(self, request: review_pb2.ContactRequest, context: Context) -> review_pb2.Contact:
        contact = await app.remove_block(self.env, Principal.from_proto(request.principal), request.address)
        return contact_to_proto(contact)

    async def RemoveSuppression(
        self, request: review_pb2.ContactRequest, context: Context
    ) -> review_pb2.Contact:
        contact = await app.remove_suppression(
            self.env, Principal.from_proto(request.principal), request.address
        )
        return contact_to_proto(contact)

    async def Ingest(self, request: common_pb2.IngestRequest, context: Context) -> common_pb2.IngestResponse:
        accepted, duplicates = await app.ingest(self.env, request.events)
        return common_pb2.IngestResponse(accepted=accepted, duplicates=duplicates)


def registrations(env: Env) -> Sequence[Registration]:
    return [
        (
            review_pb2_grpc.add_ReviewStateServiceServicer_to_server,
            ReviewStateServicer(env),
            review_pb2.DESCRIPTOR.services_by_name["ReviewStateService"].full_name,
        )
    ]
