"""The events review_state publishes, as the typed messages of ``review.v1.events``.

A nudge's reason is the table's (``machine.NUDGES`` for an edge, ``REFUSAL_NUDGES`` and
``RULES_NUDGES`` for the rest); this module only says what each reason's payload carries. Its fields
are exactly what the agent reads as ``payload``: an ``optional`` field is set only where the spec's
payload has the key.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import Message
from reviewloop.budget.v1 import budget_pb2
from reviewloop.diff.v1.diff_pb2 import Diff, DiffCommitted
from reviewloop.protoconv import rfc3339, stamp
from reviewloop.review.v1.events_pb2 import (
    Escalated,
    EscalationMail,
    HumansNotified,
    NudgeRequested,
    ReviewOutcome,
    RuleWithdrawn,
)
from reviewloop.rules.v1 import events_pb2 as rules_events
from reviewloop.rules.v1.rules_pb2 import SaveRuleRequest
from reviewloop.storage import UnitOfWork
from reviewloop.tenancy import ActorKind, Principal

from review_state.clients import DiffResult
from review_state.domain import escalation as escalations
from review_state.domain.feedback import outcome_for_rules
from review_state.domain.machine import Reason, State, Verb
from review_state.domain.pacing import StaleDraft
from review_state.domain.review import Edge, Facts, Review

N = NudgeRequested
NUDGE = "nudge"  # the outbox destination, and the event type, that the nudge service turns into nudges
RULES = "rules"  # review outcomes, per category, and decisions' new rules
OUTCOME = "review_outcome"
RULE_REQUESTED = "rule_requested"
RULE_WITHDRAWN = "rule_withdrawn"
DIFF = "diff"  # the diffs of the revision pairs reviews committed to
DIFF_COMMITTED = "diff_committed"
BUDGET = "dispatch_budget"  # the shared sending pools' settlements of releases no human reviewed
POOL_SEND_SETTLED = "pool_send_settled"
# The send paths that spend a unit of the shared sending pool (the shared-pool auto-send governor).
POOLED_PATHS = ("agent_direct", "graduated_auto", "reviewer_approved")
SENT, NOT_SENT, UNKNOWN = (
    budget_pb2.POOL_SEND_OUTCOME_SENT,
    budget_pb2.POOL_SEND_OUTCOME_NOT_SENT,
    budget_pb2.POOL_SEND_OUTCOME_UNKNOWN,
)
HUMANS_NOTIFIED = "humans_notified"  # to nudge, for the webhooks that ask for it (never the agent's)
ESCALATED = "escalated"  # to nudge, likewise: an escalation's target and deadline
MAIL = "mail"  # review_state's own mail provider delivers these (``app.notify``)
ESCALATION_MAIL = "escalation_mail"


def publish(uow: UnitOfWork, review: Review, reason: Reason, payload: Message) -> None:
    """Queue a nudge for ``review``'s agent, stamped with the review's tenancy and category."""
    event = N(
        review_id=review.id,
        org_id=review.org_id,
        project_id=review.project_id,
        agent_id=review.agent_id,
        category_id=review.category_id,
    )
    getattr(event, reason.value).CopyFrom(payload)  # the payload member is named by the reason
    uow.emit(NUDGE, review.id, NUDGE, event)


def publish_edge(uow: UnitOfWork, edge: Edge, facts: Facts) -> None:
    """Queue the nudge ``NUDGES`` says the edge emits, if any."""
    reason = edge.reason
    if reason is not None:
        publish(uow, edge.after, reason, _EDGE_PAYLOADS[reason](edge, facts))


def publish_outcome(uow: UnitOfWork, review: Review, decision: str) -> None:
    """A decided review's outcome in its category, for the rules context's maturity counters."""
    outcome = outcome_for_rules(decision)
    if outcome and review.category_id:
        message = ReviewOutcome(
            review_id=review.id,
            org_id=review.org_id,
            project_id=review.project_id,
            category_id=review.category_id,
            outcome=outcome,
        )
        uow.emit(RULES, review.id, OUTCOME, message)


def publish_pool_settled(
    uow: UnitOfWork, review: Review, outcome: budget_pb2.PoolSendOutcome.ValueType
) -> None:
    """A pooled release's outcome for dispatch_budget, in the unit that records it: delivered (the unit
    is spent), never sent (refused before or at DATA, held, given up: the unit comes back) or unknown
    past DATA (parked: kept, never refunded)."""
    system = Principal(review.org_id, review.project_id, ActorKind.SYSTEM, "review_state")
    uow.emit(
        BUDGET,
        review.id,
        POOL_SEND_SETTLED,
        budget_pb2.SettlePoolSendRequest(principal=system.to_proto(), review_id=review.id, outcome=outcome),
    )


def publish_diff(uow: UnitOfWork, principal: Principal, before: Review, diff: DiffResult) -> None:
    """The diff of the revision pair ``before`` just moved through, for the diff service to store."""
    uow.emit(
        DIFF,
        before.id,
        DIFF_COMMITTED,
        DiffCommitted(
            principal=principal.to_proto(),
            diff=Diff(
                review_id=before.id,
                from_revision=before.revision,
                to_revision=before.revision + 1,
                diff_unified=diff.diff_unified,
                diff_json=diff.diff_json,
                fields_changed=diff.fields_changed,
                input_sha256=diff.input_sha256,
            ),
        ),
    )


def publish_humans_notified(uow: UnitOfWork, review: Review, turn_id: str) -> None:
    """An auto-send in an ``auto_notify`` category, for the project's humans: the nudge service hands it
    to the webhook endpoints that asked for ``humans_notified`` (after the review's earlier events)."""
    uow.emit(
        NUDGE,
        review.id,
        HUMANS_NOTIFIED,
        HumansNotified(
            review_id=review.id,
            org_id=review.org_id,
            project_id=review.project_id,
            agent_id=review.agent_id,
            category_id=review.category_id,
            turn_id=turn_id,
            subject=review.subject,
            summary=(review.intent.summary if review.intent else ""),
            to=review.to,
            cc=review.cc,
            bcc=review.bcc,
            created_at=stamp(review.created_at),
        ),
    )


def publish_escalation(
    uow: UnitOfWork, review: Review, turn_id: str, escalation: escalations.Escalation, feedback: str
) -> None:
    """An escalation, for the webhook endpoints that ask for ``escalated`` and, when its target has an
    address, its notification mail: both in the decision's unit, so a lost race tells no one."""
    summary = review.intent.summary if review.intent else ""
    by = review.escalated_by or ""
    event = Escalated(
        review_id=review.id,
        org_id=review.org_id,
        project_id=review.project_id,
        agent_id=review.agent_id,
        category_id=review.category_id,
        turn_id=turn_id,
        subject=review.subject,
        summary=summary,
        target_kind=escalation.kind,
        target_id=escalation.target_id,
        target_name=review.escalated_to_name or "",
        escalated_by=by,
        feedback=feedback,
        revision=review.revision,
    )
    if review.escalated_at is not None:
        event.created_at.CopyFrom(stamp(review.escalated_at))
    if escalation.deadline is not None:
        event.deadline.CopyFrom(stamp(escalation.deadline))
    uow.emit(NUDGE, review.id, ESCALATED, event)
    if escalation.notify:
        subject, text = escalations.mail(review, escalation, escalation.by_name or by, feedback)
        mail = EscalationMail(
            review_id=review.id,
            to=list(escalation.notify),
            subject=subject,
            body_text=text,
            rfc_message_id=f"<escalation.{turn_id}@reviewloop>",
        )
        uow.emit(MAIL, review.id, ESCALATION_MAIL, mail)


def request_rule(uow: UnitOfWork, review: Review, rule: SaveRuleRequest) -> None:
    """A committed decision's new rule, for the rules context to save (once: the inbox dedups)."""
    uow.emit(RULES, review.id, RULE_REQUESTED, rule)


def withdraw_rule(uow: UnitOfWork, principal: Principal, review: Review, rule_id: str) -> None:
    """An undone decision's new rule, for the rules context to take back. On the review's aggregate,
    as its ``request_rule``: it reaches rules after the save, whichever of them the relay sends first."""
    withdrawn = RuleWithdrawn(principal=principal.to_proto(), review_id=review.id, rule_id=rule_id)
    uow.emit(RULES, review.id, RULE_WITHDRAWN, withdrawn)


# --- the payload of each edge's reason ---------------------------------------------------------------


def _cancelled(edge: Edge, facts: Facts) -> N.Cancelled:
    return N.Cancelled(
        state=edge.after.state.value,
        from_state=edge.before.state.value,
        cancelled_by=facts.cancelled_by,
        revision=edge.after.revision,
    )


def _feedback_added(edge: Edge, facts: Facts) -> N.FeedbackAdded:
    return N.FeedbackAdded(
        turn_id=facts.turn_id, actor_kind=edge.actor.value, body=facts.said, revision=edge.after.revision
    )


def _rejected(edge: Edge, facts: Facts) -> N.Rejected:
    return N.Rejected(revision=edge.after.revision, feedback=facts.said, by=edge.actor.value)


def _redraft_requested(edge: Edge, facts: Facts) -> N.RedraftRequested:
    if edge.verb is Verb.HOLD:
        return N.RedraftRequested(revision=edge.after.revision, by="breaker", forced_by_breaker=facts.breaker)
    return N.RedraftRequested(
        revision=edge.after.revision, by=edge.actor.value, action=edge.verb.value, feedback=facts.said
    )


def _sent(edge: Edge, facts: Facts) -> N.Sent:
    sent = edge.after
    assert sent.message_id and sent.send_path and sent.sent_at  # written by the delivered edge
    payload = N.Sent(
        state=sent.state.value,
        message_id=sent.message_id,
        send_path=sent.send_path,
        sent_at=rfc3339(stamp(sent.sent_at)),
    )
    if sent.state is State.SENT:
        payload.decision = facts.decision
        payload.approvers.extend(facts.approvers)
    else:
        payload.gate_outcome = sent.gate_outcome or ""
    if sent.thread_ref:  # an empty one would read as "a thread, unnamed"
        payload.thread_ref = sent.thread_ref
    return payload


def _send_failed(edge: Edge, facts: Facts) -> N.SendFailed:
    return N.SendFailed(
        state=edge.after.state.value,
        error=edge.after.send_error or "",
        from_state=edge.before.state.value,
        agent_retryable=False,  # nothing moves a failed review back to approved
        next_action="compose_and_submit_a_new_message",
    )


_EDGE_PAYLOADS: dict[Reason, Callable[[Edge, Facts], Message]] = {
    Reason.CANCELLED: _cancelled,
    Reason.FEEDBACK_ADDED: _feedback_added,
    Reason.REJECTED: _rejected,
    Reason.REDRAFT_REQUESTED: _redraft_requested,
    Reason.SENT: _sent,
    Reason.SEND_FAILED: _send_failed,
}


# --- the payloads no edge emits ----------------------------------------------------------------------


def front_run_next(review: Review, parent_revision: int, diff_available: bool) -> N.FrontRunNext:
    """What actually happened to the closed review an agent chased with ``parent_revision``."""
    payload = N.FrontRunNext(
        state=review.state.value,
        your_parent_revision=parent_revision,
        current_revision=review.revision,
        diff_available=diff_available,
    )
    if review.message_id:
        payload.sent_message_id = review.message_id
    return payload


def born_stale(review: Review, detail: str) -> N.RuleChanged:
    """A redraft built against older rules was refused: the agent re-reads the rules."""
    return N.RuleChanged(born_stale=True, revision=review.revision, detail=detail)


def rule_changed(draft: Review, stale: StaleDraft) -> N.RuleChanged:
    """A category rule in the draft's scope moved; the rule as the change named it."""
    payload = N.RuleChanged(rule_high_water=stale.required_high_water, revision=draft.revision)
    if stale.rule:
        payload.rule.CopyFrom(N.RuleRef(**stale.rule))
    return payload


def propagate_general_rule(
    draft: Review, stale: StaleDraft, pending_siblings: int, batch: int
) -> N.PropagateGeneralRule:
    """A general rule moved: this draft and ``pending_siblings`` more of its category, ``batch`` at a time."""
    return N.PropagateGeneralRule(
        rule=N.RuleRef(id=stale.rule.get("id", ""), rule_text=stale.rule.get("rule_text", "")),
        siblings=N.Siblings(category_id=draft.category_id, pending_count=pending_siblings),
        suggested_batch=batch,
        rule_high_water=stale.required_high_water,
    )


def recheck_category(change: rules_events.CategoryChanged) -> N.RecheckCategory:
    """The draft's category graduated, was demoted or reconciled."""
    return N.RecheckCategory(category_id=change.category_id, state=change.state, reason=change.reason)


def recheck_merged(merge: rules_events.CategoriesMerged) -> N.RecheckCategory:
    """The draft's category was merged into ``category_id`` (the draft moved there with it)."""
    return N.RecheckCategory(
        category_id=merge.into_category_id, state=merge.state, reason="merged", merged_from=merge.category_id
    )
