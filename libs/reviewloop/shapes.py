"""Every JSON shape of the contract, declared once (spec 000, "The five canonical shapes" and more).

Each gateway route reads its body as one of these and answers with one as ``response_model=``.

Each model is an OpenAPI component schema of the same name, registered even before a route answers with it
(``SHAPES``), so ``/openapi.yaml`` always carries the whole surface that ``CONTRACT_MANIFEST`` names. Shapes
are exact (``extra="forbid"``): the drift tests validate the spec's canonical examples against them, so a
renamed field anywhere breaks the build. Readers that must tolerate additive 0.x changes (the typed client)
validate with ``extra="ignore"``. Declaring a pydantic model anywhere else is refused by ruff (TID251), and
``tests/contract/test_shapes.py`` fails when a route reads or answers a schema that is not one of these.

Request bodies keep the component names they were published under (``SendIn``, ``RunIn``, ...): a generated
client names its types after them. Where one JSON shape is both read and answered (a review selection, a
runner, an intent), one model serves both.

They live in the library (not the gateway) because the typed client (``reviewloop.client``) reads them too.
Gateway routes answer with ``response_model_exclude_unset=True``, so an optional field the route did not set
is absent rather than ``null`` (spec: an empty value would lie).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    RootModel,
    StrictInt,
    WithJsonSchema,
)

from reviewloop.errors import Code
from reviewloop.tenancy import ActorKind

# Bounds of protobuf integer fields: a JSON number past them is a 422 at the edge, not an encoding error.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_BODY_TEXT = 2 * 1024 * 1024
MAX_RULE_CHARS = 2000  # the rules service's lint limit (rules.domain.guardrails.MAX_RULE_CHARS)
MAX_RULE_BODY = 20_000  # save_rule: the service lints the real limit and says so; this only bounds the body


class Shape(BaseModel):
    """A contract shape: exact, so an unknown (or renamed) field is refused."""

    model_config = ConfigDict(extra="forbid")


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


# A number of hours as the spec's examples write it: 48.0 reads as 48.
Hours = Annotated[float, PlainSerializer(_whole, return_type=Any), WithJsonSchema({"type": "number"})]
Address = Annotated[str, Field(max_length=320)]
Addresses = list[Address]
Sha = Annotated[str, Field(max_length=64)]

ReviewStateName = Literal[
    "needs_review",
    "in_review",
    "chatting",
    "rejected",
    "approved",
    "failed",
    "sent",
    "auto_sent",
    "cancelled",
    "stale",
    "stalled",
]
SendPath = Literal["human_reviewed", "reviewer_approved", "graduated_auto", "agent_direct"]
ActorKindName = Literal["agent", "human", "review_agent", "admin", "system"]
CategoryState = Literal["supervised", "auto_notify", "auto_silent"]


# --- reviews: the composer's verbs ------------------------------------------------------------------


class ReviewIntent(Shape):
    """The agent's one-sentence summary for the human reviewer.

    Required whenever the resolved mode is ``review``. Keep ``summary`` to one sentence (8-200 characters).
    """

    summary: str = Field(max_length=2000, examples=["Re-engage cold lead at Acme about Q3 pilot"])
    meta: dict[str, JsonValue] | None = None


class AttachmentIn(Shape):
    """An attachment a draft carries, its content base64-encoded."""

    filename: str = Field(min_length=1, max_length=255)
    content_type: str = Field(min_length=3, max_length=255)
    content_base64: str


class _Composed(Shape):
    """What every outbound verb may carry besides its recipients and subject."""

    cc: Addresses = Field(default_factory=list, max_length=100)
    bcc: Addresses = Field(default_factory=list, max_length=100)
    body_text: str = Field(max_length=MAX_BODY_TEXT)
    body_html: str | None = Field(default=None, max_length=MAX_BODY_TEXT)
    reply_to: Address | None = None
    headers: dict[str, str] | None = Field(default=None, max_length=50)
    attachments: list[AttachmentIn] | None = Field(default=None, max_length=20)
    intent: ReviewIntent | None = None
    category_id: str | None = Field(default=None, max_length=40)
    confidence: float | None = Field(default=None, ge=0, le=1)
    composition_token: str | None = Field(default=None, max_length=4096)


class SendIn(_Composed):
    """``send_email``: a new outbound message to ``to``."""

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


class CancelIn(Shape):
    """``cancel_review``: withdraw the draft at ``parent_revision``."""

    parent_revision: int = Field(ge=1, le=INT64_MAX)


class RevisionIn(Shape):
    """A redraft: omitted fields keep the draft's value; ``attachments: []`` clears them."""

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
    intent: ReviewIntent | None = None
    confidence: float | None = Field(default=None, ge=0, le=1)
    composition_token: str | None = Field(default=None, max_length=4096)


class RestampIn(Shape):
    """``restamp_review``: the draft at ``parent_revision`` stands as is, composed under a new token."""

    parent_revision: int = Field(ge=1, le=INT64_MAX)
    composition_token: str | None = Field(default=None, max_length=4096)


class ReviewChatRequest(Shape):
    """``post_review_chat``: an ``agent_question`` turn on the review thread."""

    text: str = Field(min_length=1, max_length=10_000)


# --- reviews: the reviewer planes -------------------------------------------------------------------


class OpenIn(Shape):
    """``open_review``: a human picks up the draft at ``revision`` and ``version``."""

    revision: int = Field(ge=1, le=INT64_MAX)
    version: int = Field(ge=1, le=INT64_MAX)


class NewRule(Shape):
    """A rule a human reviewer distils from this decision; ``scope`` defaults to ``general``."""

    rule_text: str = Field(min_length=1, max_length=MAX_RULE_CHARS)
    scope: Literal["general", "category"] = "general"
    category_id: str | None = Field(default=None, max_length=40)


class ReviewerDecisionRequest(Shape):
    """A reviewer's decision; ``revision`` and ``version`` are the optimistic CAS."""

    action: Literal["approve", "edit", "reject", "escalate"]
    revision: int = Field(ge=1, le=INT64_MAX)
    version: int = Field(ge=1, le=INT64_MAX)
    subject: str | None = Field(default=None, max_length=998)
    body: str | None = Field(
        default=None, max_length=MAX_BODY_TEXT, description="the new body_text, for an edit"
    )
    feedback: str = Field(default="", max_length=10_000)
    new_rule: NewRule | None = Field(default=None, description="human reviewers only")


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


class ReviewComment(Shape):
    """One comment of the reviewer's thread, as the feedback carries it."""

    turn_id: str
    actor_kind: ActorKindName
    body: str


class ReviewFeedback(Shape):
    """What ``get_review_feedback`` returns: the human's assembled decision."""

    review_id: str
    decision: str = Field(description="approved | edited | rejected | escalated")
    diff_unified: str | None = None
    diff_json: DiffJson | None = None
    comments: list[ReviewComment] = Field(default_factory=list)
    new_rules: list[str] = Field(default_factory=list, description="rule_ ids born from this review")


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
        description="agent_question | human_comment | decision | revision | restamp | opened | breaker"
    )
    actor_kind: ActorKindName
    body: str
    revision: int
    created_at: datetime
    action: str | None = Field(default=None, description="approve | edit | reject | escalate, on a decision")
    diff_json: DiffJson | None = None


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
    turns: list[ReviewTurn] | None = Field(
        default=None, description="get_review only: the thread, oldest first"
    )


class ReviewList(Shape):
    """``list_reviews``: a page of reviews."""

    reviews: list[Review]
    next_cursor: str | None = None


class ReviewChatResult(Review):
    """``post_review_chat``: the review as it now is, and the turn just added."""

    turn: ReviewTurn


class SubmitResult(Shape):
    """What ``send_email``, ``reply_to_email`` and ``forward_email`` answer (202)."""

    status: Literal["queued_for_review", "sent", "failed"]
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
    source: str = Field(description="project (set by an admin) | default (the require_review floor)")


class ReviewerDecisionReview(Shape):
    """The review a reviewer decision leaves behind."""

    id: str
    state: ReviewStateName
    revision: int
    version: int | None = None


class ReviewerDecisionResult(Shape):
    """The review-agent plane's answer: relayed (``sent``) or returned to the human (``sent_to_human``)."""

    kind: Literal["sent", "sent_to_human"]
    sent: bool
    sent_to_human: bool
    message_id: str | None = None
    thread_id: str | None = None
    review: ReviewerDecisionReview
    forced_by_breaker: str | None = Field(
        default=None, description="max_hops_reached | review_deadline_passed"
    )


# --- reviews: the console (review policy, contacts, inbound mail) -----------------------------------


class PolicyIn(Shape):
    """``set_review_policy``: the project's review policy."""

    policy: str = Field(max_length=32)


class AddressIn(Shape):
    """A recipient address to block or suppress."""

    address: Address


class InboundIn(Shape):
    """A received message to record, so a reply or forward has a parent."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: Address = Field(alias="from")
    to: Addresses = Field(min_length=1, max_length=100)
    cc: Addresses = Field(default_factory=list, max_length=100)
    subject: str = Field(default="", max_length=998)
    body_text: str = Field(default="", max_length=MAX_BODY_TEXT)
    headers: dict[str, str] = Field(default_factory=dict, max_length=100)


class Contact(Shape):
    """A recipient's flags in the project after a block or a suppression."""

    address: str
    blocked: bool
    suppressed: bool


class InboundMessage(Shape):
    """A recorded inbound message: the parent a reply or forward names."""

    message_id: str
    thread_ref: str
    rfc_message_id: str


# --- review events (nudges) -------------------------------------------------------------------------


class ReviewEvent(Shape):
    """A nudge: an element of ``list_review_events``.

    ``reason`` is additive across 0.x: ack and ignore one you do not know.
    """

    seq: int
    id: str
    reason: str = Field(
        description=(
            "redraft_requested | feedback_added | rejected | rule_changed | recheck_category | "
            "propagate_general_rule | sent | send_failed | cancelled | front_run_next (additive)"
        )
    )
    review_id: str
    category_id: str | None = None
    payload: dict[str, JsonValue]
    created_at: datetime | None = None


class ReviewEventList(Shape):
    """``list_review_events`` (a page) and ``wait_for_review_event`` (no cursor)."""

    events: list[ReviewEvent]
    next_cursor: str | None = None


class ReviewEventAck(Shape):
    """Acknowledge a review's nudges up to ``seq``."""

    review_id: str = Field(max_length=40)
    seq: int = Field(ge=1, le=INT64_MAX)


class AckReviewEventsRequest(Shape):
    """``ack_review_events``: one cursor per review, all or nothing."""

    acks: list[ReviewEventAck] = Field(min_length=1, max_length=100)


class AckReviewEventsResult(Shape):
    """How many review cursors moved."""

    acked: int


# --- rules ------------------------------------------------------------------------------------------


class RuleIn(Shape):
    """save_rule: a new lineage, or a revision of one naming the rev it read."""

    rule_text: str = Field(max_length=MAX_RULE_BODY)
    scope: str = Field(default="", max_length=16)
    category_id: str = Field(default="", max_length=40)
    kind: str = Field(default="", max_length=16)
    priority: int = Field(default=0, ge=-INT32_MAX, le=INT32_MAX)
    lineage_id: str = Field(default="", max_length=40)
    expected_rev: int = Field(default=0, ge=0, le=INT64_MAX)
    source_review_id: str = Field(default="", max_length=40)
    agent_id: str = Field(default="", max_length=40)


class HouseRuleIn(Shape):
    """``save_house_style_rule``: an org rule, new or a revision of ``lineage_id``."""

    rule_text: str = Field(max_length=MAX_RULE_BODY)
    kind: str = Field(default="", max_length=16)
    priority: int = Field(default=0, ge=-INT32_MAX, le=INT32_MAX)
    lineage_id: str = Field(default="", max_length=40)
    expected_rev: int = Field(default=0, ge=0, le=INT64_MAX)


class RevIn(Shape):
    """A rule lineage verb (undo, approve, reject, retire) names the rev it read."""

    rev: int = Field(ge=1, le=INT64_MAX, description="The lineage's current rev, as you read it.")


class Rule(Shape):
    """A learned writing preference, an element of ``get_rules``."""

    id: str
    lineage_id: str
    rev: int
    rule_layer: Literal["org", "project"]
    org_id: str
    project_id: str | None = None
    scope: Literal["general", "category"]
    category_id: str | None = None
    kind: Literal["soft", "hard"]
    priority: int
    rule_text: str
    source_review_id: str | None = None
    author_kind: ActorKindName
    status: Literal["proposed", "active", "superseded", "retired"]
    agent_id: str | None = None
    supersedes_id: str | None = None
    created_at: datetime | None = None


class RuleList(Shape):
    """``get_rules``: the ordered effective ladder; unfiltered, with the composition token."""

    rules: list[Rule]
    next_cursor: str | None = None
    house_style_version: int | None = None
    category_rules_version: int | None = None
    rule_high_water: int | None = None
    composition_token: str | None = None
    composition_token_expires_at: datetime | None = None


class RuleRevision(Rule):
    """A history entry: the rule as it was, plus the audit facts of the change."""

    action: str
    changed_by_kind: str
    changed_by_id: str
    rule_high_water: int | None = None


class RuleHistory(Shape):
    """Every revision of a rule lineage, oldest first: the audit log."""

    lineage_id: str
    revisions: list[RuleRevision]


class RuleSettingsIn(Shape):
    """``set_rule_settings``."""

    write_approval: bool


class RuleSettings(Shape):
    """A project's rule settings."""

    project_id: str
    write_approval: bool = Field(description="agent-authored rules are born proposed and wait for a human")


class CompositionKey(Shape):
    """The signing key composition tokens are now issued under."""

    key_id: str


# --- categories and graduation ----------------------------------------------------------------------


class CategoryIn(Shape):
    """``create_category``: an agent adds a category."""

    name: str = Field(max_length=1000)
    description: str = Field(default="", max_length=10_000)
    scope: str = Field(default="", max_length=16)


class AdminCategoryIn(CategoryIn):
    """``predefine_category``: the console adds a category, possibly locked from graduating."""

    never_graduate: bool = False


class CategoryPatch(Shape):
    """``update_category``: an absent field is untouched."""

    name: str | None = Field(default=None, max_length=1000)
    description: str | None = Field(default=None, max_length=10_000)
    never_graduate: bool | None = None


class ProposalIn(Shape):
    """``propose_graduation``: the rung proposed, and why."""

    to_state: str = Field(default="", max_length=16)
    note: str = Field(default="", max_length=10_000)


class GraduateIn(Shape):
    """``graduate_category``: the rung a human sets."""

    to_state: str = Field(max_length=16)


class Category(Shape):
    """An element of ``list_categories``: keyed on the opaque ``cat_`` id; name is display metadata."""

    id: str
    name: str
    description: str
    scope: Literal["org_shared", "project"]
    state: CategoryState
    author_kind: ActorKindName
    rule_high_water: int
    rules_version: int
    never_graduate: bool
    clean_approval_count: int
    drift_count: int
    org_id: str | None = None
    project_id: str | None = None
    created_at: datetime | None = None


class CategoryList(Shape):
    """``list_categories``: a page of categories."""

    categories: list[Category]
    next_cursor: str | None = None


class GraduationStatus(Shape):
    """``get_graduation_status``: read-only progress toward the next rung."""

    category_id: str
    state: CategoryState
    next_state: Literal["auto_notify", "auto_silent"] | None = None
    never_graduate: bool
    clean_approval_count: int
    graduate_min_approvals: int
    approvals_met: bool
    age_hours: float
    graduate_min_age_hours: Hours
    age_met: bool
    maturity_gate_met: bool
    drift_count: int
    drift_demote_after: int
    can_graduate: bool


class GraduationProposal(Shape):
    """An agent's proposal of the next rung, waiting for a human; with its category's status."""

    id: str
    category_id: str
    from_state: str
    to_state: str
    proposed_by: str
    note: str
    status: str
    created_at: datetime
    graduation: GraduationStatus


class GraduationProposalList(Shape):
    """The graduation proposals waiting for a human."""

    proposals: list[GraduationProposal]


# --- the risk dial ----------------------------------------------------------------------------------


class DialValues(Shape):
    """Dial fields; an absent field is untouched, ``null`` inherits (or resets the account's)."""

    min_confidence: float | None = None
    first_contact_gate: bool | None = None
    drift_demote_after: int | None = Field(default=None, le=INT32_MAX)
    canary_rate: float | None = None
    graduate_min_approvals: int | None = Field(default=None, le=INT32_MAX)
    graduate_min_age_hours: float | None = None
    auto_send_cap_per_day: int | None = Field(default=None, le=INT32_MAX)


class CategoryDialIn(DialValues):
    """A category's dial overrides; ``null`` inherits the account's value."""

    category_id: str = Field(max_length=40)


class RiskDialIn(Shape):
    """``set_risk_dial``: account fields merge, each listed category's overrides are replaced."""

    account: DialValues | None = None
    categories: list[CategoryDialIn] = Field(default_factory=list, max_length=500)


class RiskValues(Shape):
    """Every dial value in force."""

    min_confidence: float
    first_contact_gate: bool
    drift_demote_after: int
    canary_rate: float
    graduate_min_approvals: int
    graduate_min_age_hours: Hours
    auto_send_cap_per_day: int


class CategoryRiskDial(Shape):
    """A category's overrides (``null`` inherits the account default) and the values in force."""

    category_id: str
    min_confidence: float | None = None
    first_contact_gate: bool | None = None
    drift_demote_after: int | None = None
    canary_rate: float | None = None
    graduate_min_approvals: int | None = None
    graduate_min_age_hours: Hours | None = None
    auto_send_cap_per_day: int | None = None
    effective: RiskValues


class RiskDial(Shape):
    """``get_risk_dial``: the resolved brand-risk dial. Agents read it; the console sets it."""

    account: RiskValues
    categories: list[CategoryRiskDial] = Field(default_factory=list)


RISK_DIAL_FIELDS: tuple[str, ...] = tuple(RiskValues.model_fields)


# --- dispatch budget: review rounds (spec 003) ------------------------------------------------------


class Mode(StrEnum):
    """A review mode of spec 003."""

    WARM = "warm"
    COLD = "cold"


RunStatusName = Literal["active", "failed", "interrupted", "published", "archived"]
AttemptKindName = Literal["initial", "retry", "pipeline", "standalone", "publish_gate", "recheck"]
LaunchTriggerName = Literal[
    "operator_request",
    "continue_fixing",
    "send_back",
    "fix_rereview",
    "recovered_fix_rereview",
    "publication_plan",
]


class SelectionIn(Shape):
    """A review selection: exactly runner, model, effort and mode."""

    runner: str = Field(min_length=1, max_length=80)
    model: str = Field(default="", max_length=80)
    effort: str = Field(default="", max_length=40)
    mode: Mode


class RunIn(Shape):
    """``record_review_run``: a run's record; an omitted field keeps what the run has."""

    repository: str = Field(default="", max_length=200)
    pr_number: int = Field(default=0, ge=0, le=INT64_MAX)
    head_sha: Sha = ""
    status: RunStatusName | None = None
    # The run's rungs of resolveReviewMode; omitted keeps what the run has.
    review_mode: Mode | None = None
    pr_work_review_mode: Mode | None = None
    repeat_review_context_mode: Mode | None = None


class AdmitIn(Shape):
    """``admit_review_round``: ask the round budget for one reviewer round."""

    run_id: str = Field(min_length=1, max_length=80)
    attempt_key: str = Field(default="", max_length=200)
    kind: AttemptKindName
    trigger: LaunchTriggerName
    head_sha: Sha = ""
    selection: SelectionIn | None = None
    receipt_id: str = Field(default="", max_length=40)


class SettleIn(Shape):
    """``settle_review_attempt``: a verdict, or why there is none."""

    verdict: Literal["pass", "issues"] | None = None
    reviewed_head: Sha = ""
    no_verdict_reason: str = Field(default="", max_length=40)
    journal_run_id: str = Field(default="", max_length=80)


class ExtendIn(Shape):
    """run.extendReviewBudget. ``approved_by`` is accepted and ignored: authority comes from the key."""

    head_sha: Sha
    limit: StrictInt = Field(ge=1, le=1000)
    expected_limit: StrictInt = Field(ge=1, le=1000)
    scope_brief: str = Field(max_length=4000)
    request_id: str = Field(default="", max_length=255)
    approved_by: str | None = Field(default=None, max_length=200)


class ReviewRun(Shape):
    """A review run as recorded: its status, its budget scope and its rungs of resolveReviewMode."""

    run_id: str
    status: RunStatusName
    scope_key: str
    repository: str | None = None
    pr_number: int | None = None
    head_sha: str | None = None
    review_mode: Mode | None = None
    pr_work_review_mode: Mode | None = None
    repeat_review_context_mode: Mode | None = None


class Settlement(Shape):
    """How an admitted round settled."""

    outcome: Literal["counted", "no_verdict"]
    settled_at: datetime
    reason: str | None = None
    verdict: str | None = None


class AdmissionReceipt(Shape):
    """An admitted reviewer round: what it spent, for which head, and how it settled."""

    receipt_id: str
    run_id: str
    scope_key: str
    attempt_key: str
    kind: AttemptKindName
    trigger: LaunchTriggerName
    head_sha: str
    round: int
    admitted_at: datetime
    selection: SelectionIn | None = None
    settlement: Settlement | None = None


class RequestOrigin(Shape):
    """Who granted an extension, and from where."""

    actor_kind: ActorKindName
    actor_id: str
    key_id: str | None = None
    remote_addr: str | None = None
    user_agent: str | None = None


class ExtensionReceipt(Shape):
    """A scoped budget extension, granted by a project admin for one head."""

    receipt_id: str
    request_id: str
    run_id: str
    scope_key: str
    approved_head: str
    prior_limit: int
    new_limit: int
    scope_brief: str
    origin: RequestOrigin
    granted_at: datetime
    repository: str | None = None
    pr_number: int | None = None


class LaunchRefusal(Shape):
    """The last reviewer launch the budget refused, and why."""

    run_id: str
    attempt_key: str
    trigger: LaunchTriggerName
    no_verdict: int
    reason: str
    refused_at: datetime


class RoundBudget(Shape):
    """The reviewer round budget of a scope: what is used, the limit, and why a launch was refused."""

    scope_key: str
    used: int
    limit: int
    admissions: int
    no_verdict: int
    no_verdict_limit: int
    label: str
    exhausted: bool
    no_verdict_capped: bool
    extension: ExtensionReceipt | None = None
    last_launch_refusal: LaunchRefusal | None = None


class AdmissionResult(Shape):
    """``admit_review_round``: the receipt, and the budget after it."""

    receipt: AdmissionReceipt
    reattached: bool
    review_round_budget: RoundBudget


class SettlementResult(Shape):
    """``settle_review_attempt``: the settled receipt, and the budget after it."""

    receipt: AdmissionReceipt
    review_round_budget: RoundBudget


# --- dispatch budget: the selection catalog, sequences, mode, lineage (spec 003) --------------------


class RunnerIn(Shape):
    """A reviewer runner of the selection catalog and what it supports."""

    name: str = Field(min_length=1, max_length=80)
    models: list[Annotated[str, Field(max_length=80)]] = Field(min_length=1, max_length=50)
    efforts: list[Annotated[str, Field(max_length=40)]] = Field(min_length=1, max_length=50)
    default_model: str = Field(max_length=80)
    default_effort: str = Field(max_length=40)
    supports_warm: bool = True
    supports_model_change: bool = False


class RunnerList(Shape):
    """``list_runners``: the selection catalog."""

    runners: list[RunnerIn]


class ReviewConfigIn(RootModel[dict[str, Any]]):
    """The project review configuration; its ``review.mode`` is the project default mode."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"review": {"mode": "warm"}}]})


class ReviewConfig(Shape):
    """The stored project review configuration and the project default mode it sets."""

    config: dict[str, JsonValue]
    mode: Mode | None = None


class SequenceIn(Shape):
    """The rows go through the shared validator in the service, which names each bad row's field."""

    sequence: Any


class SequenceValidation(Shape):
    """A review sequence as validated: its rows, and the request_review it resolves to."""

    sequence: list[SelectionIn]
    request_review: JsonValue


class ModeIn(Shape):
    """``resolve_review_mode``: the rungs given; a stored run's fill those left unset."""

    explicit: Mode | None = None
    run: Mode | None = None
    pr_work: Mode | None = None
    repeat_context: Mode | None = None
    project_default: Mode | None = None
    project_config: dict[str, Any] | None = None
    # A stored run: its rungs fill those left unset here.
    run_id: str = Field(default="", max_length=80)


class ResolvedReviewMode(Shape):
    """The mode resolveReviewMode settles on, and the rung that decided it."""

    mode: Mode
    source: str = Field(description="the rung of resolveReviewMode that decided")


class BindIn(Shape):
    """``bind_review_session``: bind a review lineage to a reviewer session."""

    repository: str = Field(min_length=1, max_length=200)
    pr_number: int = Field(ge=1, le=INT64_MAX)
    selection: SelectionIn
    base_sha: Sha
    head_sha: Sha
    review_id: str = Field(default="", max_length=80)
    new_review_id: str = Field(default="", max_length=80)


class CompleteIn(Shape):
    """``complete_review_session``: the head the session reviewed."""

    reviewed_head: Sha


class DiffRange(Shape):
    """The diff range a review session covers."""

    base: str
    head: str


class ReviewSessionBinding(Shape):
    """The reviewer session a review lineage is bound to, and the diff range it reviews."""

    review_id: str
    session_id: str
    mode: Mode
    range: DiffRange
    fresh_session: bool
    selection: SelectionIn
    busy: bool


# --- dispatch budget: attempt journals (spec 002) ---------------------------------------------------


class JournalIn(Shape):
    """``append_journal_events`` as JSON (JSON lines are accepted as well)."""

    events: list[dict[str, Any]] = Field(max_length=500)


class JournalAppendResult(Shape):
    """What a journal append stored."""

    appended: int
    skipped_ephemeral: int
    last_offset: int


class EvidenceStatus(Shape):
    """A run's journal evidence marker (spec 002's tri-state) and why it was rejected, if it was."""

    run_id: str
    evidence: str
    offset: int | None = None
    schema_version: str | None = None
    evidence_rejected: dict[str, JsonValue] | None = None


# --- dispatch budget: the review-run gate (spec 001) ------------------------------------------------


class DigestIn(Shape):
    """The bounded digest's inputs; tool output is never accepted here."""

    last_human_message: str = Field(default="", max_length=100_000)
    last_assistant_message: str = Field(default="", max_length=100_000)
    loaded_skills: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=50)


class TurnIn(Shape):
    """``record_turn``: one finished turn of a session."""

    origin: str = Field(default="", max_length=40)
    depth: int = Field(default=0, ge=0, le=100)
    status: Literal["completed", "aborted", "failed"]
    tool_calls: int = Field(default=0, ge=0, le=100_000)
    digest: DigestIn = Field(default_factory=DigestIn)


class ReviewIn(Shape):
    """``review_now``: ask the gate for a review now."""

    now: bool = False
    digest: DigestIn = Field(default_factory=DigestIn)


class EnabledIn(Shape):
    """``set_review_enabled``: switch the session's gate on or off."""

    enabled: bool


class FinishIn(Shape):
    """``finish_review``: how the session's review ended."""

    succeeded: bool


class GateDecision(Shape):
    """One decision of the gate's log (the gates.jsonl record, with snake_case keys)."""

    at: datetime
    session: str
    turn: int
    decision: str
    source: str
    reason: str
    choice: str | None = None
    confidence: float | None = None
    probability: float | None = None
    tool_calls: int
    latency_ms: int
    threshold: float


class GateDecisionList(Shape):
    """``list_gate_decisions``: a page of the decision log."""

    decisions: list[GateDecision]
    next_cursor: str | None = None


class SessionCounters(Shape):
    """A session's turn counters (spec 001)."""

    turns: int
    tools: int
    turn_index: int
    reviews: int
    in_flight: bool
    enabled: bool


class TurnResult(Shape):
    """A session's counters after a turn, and the gate's decision when a review came due."""

    counters: SessionCounters
    counted: bool
    decision: GateDecision | None = None
    not_due_reason: str | None = None


# --- the console: projects and API keys -------------------------------------------------------------


class ProjectIn(Shape):
    """``create_project``: in a new org, or in ``org_id``."""

    name: str = Field(min_length=1, max_length=200)
    org_id: str | None = Field(default=None, max_length=40)


class ProjectOut(Shape):
    """A created project."""

    org_id: str
    project_id: str
    name: str


class ApiKeyIn(Shape):
    """``issue_api_key``: a key for a project and an actor kind."""

    project_id: str = Field(min_length=1, max_length=40)
    actor_kind: ActorKind
    name: str = Field(default="", max_length=200)


class ApiKeyOut(Shape):
    """An issued key; the secret is shown once."""

    key_id: str
    api_key: str = Field(description="The secret, shown once; only its hash is stored.")
    actor_kind: ActorKind
    org_id: str
    project_id: str
    agent_id: str | None = None


class RevokedOut(Shape):
    """A revoked key."""

    key_id: str
    revoked: bool


# --- operations -------------------------------------------------------------------------------------


class ProblemError(Shape):
    """One recovery fact or bad field.

    ``field`` is a JSON pointer; ``code`` names the fact (``state``, ``revision``, ``version``,
    ``allowed_action``, ``sent_message_id``, ...).
    """

    field: str | None = None
    code: str | None = None
    detail: str | int | None = None


class Problem(Shape):
    """RFC 9457 problem details: branch on ``code``, never on ``status`` alone."""

    type: str
    title: str
    status: int
    detail: str
    code: Code
    errors: list[ProblemError] | None = None
    request_id: str | None = None


class ContractManifest(Shape):
    """The machine-readable contract a harness pins against."""

    version: str
    stability: Literal["provisional"]
    kind: Literal["sdk+skill-contract"]
    core_shapes: list[str]
    shapes: list[str]
    skills: list[str]


class Health(Shape):
    """``ok`` when every backend reports SERVING (200); ``degraded`` names the ones that do not (503)."""

    status: Literal["ok", "degraded"]
    backends: dict[str, str]


# Every shape above, in declaration order: the public models of this module (private bases excluded).
SHAPES: tuple[type[BaseModel], ...] = tuple(
    value
    for name, value in list(globals().items())
    if isinstance(value, type)
    and issubclass(value, BaseModel)
    and value.__module__ == __name__
    and value is not Shape
    and name.isidentifier()  # not pydantic's parametrized generics ("RootModel[dict[str, Any]]")
    and not name.startswith("_")
)


def component_schemas() -> dict[str, Any]:
    """Every shape as an OpenAPI 3.1 component schema, keyed by its model name."""
    from pydantic.json_schema import models_json_schema

    _, document = models_json_schema(
        [(model, "serialization") for model in SHAPES], ref_template="#/components/schemas/{model}"
    )
    schemas: dict[str, Any] = document.get("$defs", {})
    return schemas
