"""Review shapes: the composer's verbs, the reviewer planes, what the verbs answer (the console's policy, contacts and mail: mail.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import (
    AwareDatetime,
    Field,
    JsonValue,
    RootModel,
)

from reviewloop.shapes._base import (
    INT64_MAX,
    MAX_BODY_TEXT,
    MAX_RULE_CHARS,
    ActorKindName,
    ReviewModeName,
    ReviewStateName,
    SendPath,
    Shape,
)
from reviewloop.shapes.composing import (
    MessageSha256,
    ReviewIntent,
)
from reviewloop.shapes.escalation import EscalationTarget, ReviewEscalation

# --- reviews: the reviewer planes -------------------------------------------------------------------


class OpenIn(Shape):
    """``open_review``: a human picks up the draft at ``revision`` and ``version``."""

    revision: int = Field(ge=1, le=INT64_MAX)
    version: int = Field(ge=1, le=INT64_MAX)


class UndoDecisionIn(Shape):
    """``undo_decision``: the decider takes back its release in its undo window.

    It names the approved review's ``revision`` and ``version``, as the decision answered them.
    """

    revision: int = Field(ge=1, le=INT64_MAX)
    version: int = Field(ge=1, le=INT64_MAX)


class NewRule(Shape):
    """A rule a human reviewer distils from this decision; ``scope`` defaults to ``general``.

    House style is ``rule_layer: org`` (an admin key only); a per-agent rule names the review's agent as
    ``scope_agent_id``.
    """

    rule_text: str = Field(min_length=1, max_length=MAX_RULE_CHARS)
    scope: Literal["general", "category"] = "general"
    category_id: str | None = Field(default=None, max_length=40)
    rule_layer: Literal["project", "org"] = Field(
        default="project", description="org: house style, inherited by every project of the org (admins only)"
    )
    scope_agent_id: str | None = Field(
        default=None, max_length=40, description="a rule for the review's agent only (its agent_id)"
    )


ReviewerActionName = Literal["approve", "edit", "reject", "escalate"]


class ReviewerAction(RootModel[ReviewerActionName]):
    """A reviewer's decision verb (the SDK's ``ReviewerAction``)."""


class ReviewerDecisionRequest(Shape):
    """A reviewer's decision; ``revision`` and ``version`` are the optimistic CAS."""

    action: ReviewerActionName
    revision: int = Field(ge=1, le=INT64_MAX)
    version: int | None = Field(
        default=None, ge=1, le=INT64_MAX, description="optional row-version CAS (defense in depth)"
    )
    subject: str | None = Field(default=None, max_length=998)
    body: str | None = Field(
        default=None, max_length=MAX_BODY_TEXT, description="the new body_text, for an edit"
    )
    body_html: str | None = Field(
        default=None,
        max_length=MAX_BODY_TEXT,
        description="for an edit of a draft with an HTML part: its new HTML, sanitized before it is kept; "
        "omitted, the HTML part is regenerated from the edited body so the two parts never disagree",
    )
    feedback: str = Field(default="", max_length=10_000)
    new_rule: NewRule | None = Field(default=None, description="human reviewers only")
    escalate_to: EscalationTarget | None = Field(
        default=None, description="escalate only: the person or role of the project it goes to (told by mail)"
    )
    escalation_deadline: AwareDatetime | None = Field(
        default=None, description="escalate only: by when the target should decide (in the future)"
    )
    message_sha256: MessageSha256 | None = Field(
        default=None,
        description="the approval digest of the message the decider saw (get_review's, or "
        "preview_review_message's for an edit); an approve or edit whose message would hash otherwise is "
        "refused 409 stale, with the digest it now has, and nothing is done",
    )
    override_held: bool = Field(
        default=False,
        description="human reviewers, approve only: approve a draft a rule holds (composed under older rules, "
        "waiting for its agent to re-apply them) as it stands; the decision turn records the override",
    )


# --- reviews: what the review verbs answer ----------------------------------------------------------


class DiffHunk(Shape):
    """One changed field: its value before and after."""

    field: str
    op: str = Field(description="replace | insert | delete")
    before: JsonValue = None
    after: JsonValue = None
    before_start: int | None = Field(
        default=None, description="text, list and map fields: the 1-based line (or item) the hunk starts at"
    )
    after_start: int | None = None
    line_endings_only: bool | None = Field(
        default=None, description="the lines differ only in their endings (CRLF and LF compare equal)"
    )


class DiffJson(Shape):
    """The structured, deterministic proposed-vs-sent diff."""

    fields_changed: list[str]
    hunks: list[DiffHunk]


class ReviewFeedbackComment(Shape):
    """One comment of the reviewer's thread, as the feedback carries it."""

    turn_id: str
    actor_kind: ActorKindName
    body: str
    actor_id: str | None = None
    created_at: datetime | None = None


class ReviewFeedback(Shape):
    """What ``get_review_feedback`` returns: the human's assembled decision."""

    review_id: str
    decision: str = Field(description="approved | edited | rejected | escalated")
    diff_unified: str | None = None
    diff_json: DiffJson | None = None
    comments: list[ReviewFeedbackComment] = Field(default_factory=list)
    new_rules: list[str] = Field(default_factory=list, description="rule_ ids born from this review")
    approvers: list[str] = Field(
        default_factory=list,
        description="the actors whose approval stands on the current revision (every approver of a "
        "quorum), in the order they gave it",
    )


class Attachment(Shape):
    """An attachment as a review reads it back."""

    filename: str
    content_type: str
    size: int
    content_base64: str


class ReviewTurn(Shape):
    """One turn of a review's thread (chat, decision, revision, ...)."""

    id: str
    seq: int
    turn_type: str = Field(
        description="agent_question | human_comment | decision | revision | restamp | opened | breaker | "
        "humans_notified | undo (a decider took back its release in the undo window)"
    )
    actor_kind: ActorKindName
    body: str
    revision: int
    created_at: datetime
    action: str | None = Field(default=None, description="approve | edit | reject | escalate, on a decision")
    diff_json: DiffJson | None = None
    actor_id: str | None = None
    metadata: dict[str, JsonValue] | None = None


class ReviewTurnList(Shape):
    """``get_review_turns``: a review's thread, oldest first."""

    items: list[ReviewTurn]
    total: int
    next_cursor: str | None = None


class ReviewDelivery(Shape):
    """How far a released review's delivery got (``get_review``).

    A review stays ``approved`` only while this says why.
    """

    status: Literal["queued", "sending", "send_needs_reconciliation", "delivered", "failed"] = Field(
        description="queued: waiting for its (next) try; sending: a try is past DATA; "
        "send_needs_reconciliation: the relay's answer was lost, so evidence or an operator decides "
        "(never a resend, never a timer)"
    )
    tries: int
    started_at: datetime = Field(description="when the review was released to delivery")
    parked_at: datetime | None = Field(default=None, description="send_needs_reconciliation since")
    age_s: float = Field(description="seconds since release, while open; until it closed, after")
    error: str | None = Field(default=None, description="the last try's error, or the refusal")
    resolution: str | None = Field(default=None, description="who closed a parked delivery by hand, and why")


class DeliveryResolutionIn(Shape):
    """``resolve_delivery``: the operator's evidence for a parked delivery."""

    outcome: Literal["delivered", "failed"]
    reason: str = Field(min_length=1, max_length=500)


class Review(Shape):
    """A review row as every read and mutation answers it."""

    id: str
    state: ReviewStateName
    revision: int = Field(description="counts the composer's drafts")
    version: int = Field(description="counts every mutation of the row")
    closed: bool
    org_id: str
    project_id: str
    agent_id: str
    category_id: str | None = None
    kind: Literal["send", "reply", "forward"]
    from_address: str | None = None
    to: list[str]
    cc: list[str]
    bcc: list[str]
    subject: str
    body_text: str
    intent: ReviewIntent | None = None
    created_at: datetime
    updated_at: datetime
    message_id: str | None = None
    thread_ref: str | None = None
    send_path: SendPath | None = None
    send_error: str | None = None
    gate_outcome: str | None = None
    body_html: str | None = None
    reply_to: str | None = None
    parent_message_id: str | None = None
    confidence: float | None = None
    headers: dict[str, str] | None = None
    attachments: list[Attachment] | None = None
    decided_at: datetime | None = None
    sent_at: datetime | None = None
    undo_until: datetime | None = Field(
        default=None,
        description="while a reviewer's approve or edit waits out its undo window: when it goes to delivery; "
        "until then its decider may undo it (undo_decision)",
    )
    turns: list[ReviewTurn] | None = Field(
        default=None, description="get_review only: the thread, oldest first"
    )
    # The SDK's names for the same facts (its ``Review`` type reads these).
    mode: ReviewModeName = Field(description="review | direct: how the draft was asked to travel")
    effective_mode: ReviewModeName = Field(description="review | direct: how the resolved policy routes it")
    intent_summary: str = Field(description="the intent's summary; empty when the draft has none")
    # An object, never null (empty when the intent has none): a nullable twin of ReviewIntent.meta would
    # give generated clients two models of one name (ReviewIntentMetaType0).
    intent_meta: dict[str, JsonValue] = Field(default_factory=dict)
    proposed_subject: str
    proposed_body_text: str
    proposed_body_html: str | None = None
    proposed_to: list[str]
    proposed_cc: list[str]
    proposed_bcc: list[str]
    recheck_completed_through_seq: int = Field(
        default=0, description="the highest nudge seq its agent re-checked the draft against (0: none)"
    )
    rule_high_water: int = Field(
        default=0,
        description="the rule high-water the draft is checked against: a rule saved above it leaves it stale",
    )
    rule_snapshot_named: bool = Field(
        default=True,
        description="false: its agent named no rule snapshot (no composition_token, no rules_version_seen), so "
        "rule_high_water is the stack's when it was written, not rules it read",
    )
    sent_subject: str | None = None
    sent_body_text: str | None = None
    sent_message_id: str | None = None
    delivery: ReviewDelivery | None = Field(
        default=None, description="get_review only, once released: how far its delivery got"
    )
    escalation: ReviewEscalation | None = Field(
        default=None,
        description="whom a reviewer escalated the draft to, and by when (absent: not escalated)",
    )
    # get_review and the decision context only: the approval digest of the exact message an approval delivers
    # now, which a decision names (described on the decision: an agent's tool list stays under 60 kB).
    message_sha256: str | None = None


class MessagePreviewIn(Shape):
    """A proposed edit to preview (as the decision's edit fields); all omitted: the review as it stands."""

    subject: str | None = Field(default=None, max_length=998)
    body: str | None = Field(default=None, max_length=MAX_BODY_TEXT, description="the new body_text")
    body_html: str | None = Field(default=None, max_length=MAX_BODY_TEXT)


class MessagePreview(Shape):
    """``preview_review_message``: what an approval (or the edit proposed) would deliver, and its digest.

    The exact MIME message, every part; nothing is written.
    """

    review_id: str
    revision: int
    version: int
    message_sha256: str = Field(description="name it in the decision's message_sha256")
    subject: str
    body_text: str
    body_html: str | None = Field(
        default=None, description="the HTML part as delivered (sanitized or regenerated); absent: none"
    )
    html_regenerated: bool = Field(description="the edit's HTML part was regenerated from its text")
    raw_mime: str = Field(
        description="the wire bytes (CRLF); Date and Message-ID are placeholders, outside the digest"
    )


class ReviewDecisionContext(Shape):
    """``get_review_decision_context``: what a reviewer weighs before deciding (the SDK's type).

    The review and its append-only thread, and the two circuit breakers: (a) review-agent rounds (hops)
    against their limit, (b) the review deadline. ``force_to_human`` when either has tripped (the next
    decision goes to a human), or when a breaker held a review agent's release; ``force_reason`` names it.
    A field is null where nothing records it.
    """

    review_id: str
    review: Review = Field(description="the review as it now is (its thread is ``turns``)")
    turns: list[ReviewTurn] = Field(description="the review's append-only thread, oldest first")
    hop_count: int = Field(description="Review-agent rounds spent on this review.")
    max_hops: int | None = Field(
        default=None, description="The round limit; null until the first review-agent round is admitted."
    )
    review_deadline: datetime | None = Field(
        default=None,
        description="When a review agent's time to decide runs out (the category's review deadline); "
        "null: the draft carries none.",
    )
    deadline_passed: bool = Field(description="Breaker (b): the review deadline has passed.")
    hops_exhausted: bool = Field(description="Breaker (a): hop_count has reached max_hops.")
    force_to_human: bool = Field(
        description="A breaker tripped, or held a review agent's release: the next decision is a human's."
    )
    force_reason: str | None = Field(
        default=None,
        description="max_hops_reached | review_deadline_passed, or the breaker that held a release",
    )


class ReviewList(Shape):
    """``list_reviews``: a page of reviews (the SDK's ``Page<Review>``)."""

    items: list[Review]
    total: int = Field(description="how many reviews the filters match, across every page")
    next_cursor: str | None = None


class ReviewChatResult(Review):
    """``post_review_chat``: the review as it now is, and the turn just added."""

    turn: ReviewTurn


class SentMessage(Shape):
    """The message a submit delivered (the SDK's ``SentResult.message``)."""

    id: str
    thread_id: str | None = None


class SubmitForReviewResult(Shape):
    """What ``send_email``, ``reply_to_email`` and ``forward_email`` answer (202).

    ``kind`` is the SDK's discriminator and ``status`` the spec's, always the same value:
    ``queued_for_review``, a draft waiting for a reviewer; ``sent``, a release (spec 000's ``202 {status:
    "sent", message_id, review_id}``) whose ``message`` / ``message_id`` name the message even while its
    delivery outlasts the wait (``state: approved``; the terminal event says how it ended).
    """

    kind: Literal["queued_for_review", "sent"]
    message: SentMessage | None = None
    status: Literal["queued_for_review", "sent"] = Field(
        description="sent: released to delivery (``state`` says how far it got: approved while it is "
        "being delivered, sent / auto_sent, or failed)"
    )
    review_id: str
    state: ReviewStateName | None = None
    message_id: str | None = None
    thread_ref: str | None = None
    send_error: str | None = None
    gate_outcome: str | None = None
    review: Review | None = None


class ReviewPolicy(Shape):
    """The review policy in force for the project, and where it comes from."""

    policy: str
    source: str = Field(
        description="override (the project's, set by an admin) | account default | floor (require_review)"
    )
    require_composition_token: bool = Field(
        default=False,
        description="the project refuses a send, reply or forward without a composition_token (console setting)",
    )


class ReviewerDecisionReview(Shape):
    """The review a reviewer decision leaves behind."""

    id: str
    state: ReviewStateName
    revision: int
    version: int | None = None


class ReviewerDecisionResult(Shape):
    """The review-agent plane's answer: relayed (``sent``) or returned to the human (``sent_to_human``).

    ``kind`` is the spec's and the SDK's, nothing else: ``sent`` when the platform released the draft with the
    composer's credentials (an approve or an edit), ``sent_to_human`` when it went back to the human queue.
    How far a release's delivery got is ``delivery_status``: ``sent`` is true only once it is ``delivered``.
    """

    kind: Literal["sent", "sent_to_human"]
    delivery_status: Literal["delivered", "queued", "failed"] | None = Field(
        default=None,
        description="on a release: delivered; queued (still going, or parked for reconciliation: the "
        "review's delivery says which); failed (the provider refused it)",
    )
    sent: bool
    sent_to_human: bool
    message_id: str | None = None
    thread_id: str | None = None
    review: Review | ReviewerDecisionReview = Field(
        description="the whole review (the SDK's type); the spec's example shows its id, state and revision"
    )
    forced_by_breaker: str | None = Field(
        default=None,
        description="max_hops_reached | no_verdict_cap_reached | review_deadline_passed, or the circuit "
        "breaker that held the release",
    )
