"""The contract's published shapes (spec 000, "The five canonical shapes" and "The rest of the surface").

Each model is an OpenAPI component schema of the same name, registered even before a route answers
with it (``SHAPES``), so ``/openapi.yaml`` always carries the whole surface that ``CONTRACT_MANIFEST``
names. Shapes are exact (``extra="forbid"``): the drift tests validate the spec's canonical examples
against them, so a renamed field anywhere breaks the build. Readers that must tolerate additive 0.x
changes (the typed client) validate with ``extra="ignore"``.

They live in the library (not the gateway) because the typed client (``reviewloop.client``) reads
them too. Gateway route owners: answer with these as ``response_model=`` and ``response_model_exclude_unset=True``, so
an optional field the route did not set is absent rather than ``null`` (spec: an empty value would lie).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from reviewloop.errors import Code


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class ReviewIntent(Shape):
    """The agent's one-sentence summary for the human reviewer, required whenever the resolved mode is
    ``review``. Keep ``summary`` to one sentence (8-200 characters).
    """

    summary: str = Field(max_length=2000, examples=["Re-engage cold lead at Acme about Q3 pilot"])
    meta: dict[str, JsonValue] | None = None


class DiffHunk(Shape):
    """One changed field: its value before and after."""

    field: str
    op: str = Field(description="replace | add | remove")
    before: JsonValue = None
    after: JsonValue = None


class DiffJson(Shape):
    """The structured, deterministic proposed-vs-sent diff."""

    fields_changed: list[str]
    hunks: list[DiffHunk]


class ReviewComment(Shape):
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


class ReviewEvent(Shape):
    """A nudge: an element of ``list_review_events``. ``reason`` is additive across 0.x: ack and ignore
    one you do not know.
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
    events: list[ReviewEvent]
    next_cursor: str | None = None


class ReviewEventAck(Shape):
    review_id: str
    seq: int = Field(ge=1)


class AckReviewEventsRequest(Shape):
    acks: list[ReviewEventAck] = Field(min_length=1, max_length=100)


class AckReviewEventsResult(Shape):
    acked: int


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


class ReviewList(Shape):
    reviews: list[Review]
    next_cursor: str | None = None


class SubmitResult(Shape):
    """What ``send_email``, ``reply_to_email`` and ``forward_email`` answer (202)."""

    status: Literal["queued_for_review", "sent"]
    review_id: str
    state: ReviewStateName | None = None
    message_id: str | None = None
    review: Review | None = None


class ReviewChatRequest(Shape):
    """``post_review_chat``: an ``agent_question`` turn on the review thread."""

    text: str = Field(min_length=1, max_length=20000)


class Category(Shape):
    """An element of ``list_categories``: keyed on the opaque ``cat_`` id; name is display metadata."""

    id: str
    name: str
    description: str
    scope: Literal["org_shared", "project"]
    state: Literal["supervised", "auto_notify", "auto_silent"]
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
    categories: list[Category]
    next_cursor: str | None = None


class GraduationStatus(Shape):
    """``get_graduation_status``: read-only progress toward the next rung."""

    category_id: str
    state: Literal["supervised", "auto_notify", "auto_silent"]
    next_state: Literal["auto_notify", "auto_silent"] | None = None
    never_graduate: bool
    clean_approval_count: int
    graduate_min_approvals: int
    approvals_met: bool
    age_hours: float
    graduate_min_age_hours: float
    age_met: bool
    maturity_gate_met: bool
    drift_count: int
    drift_demote_after: int
    can_graduate: bool


class RiskValues(Shape):
    """Every dial value in force."""

    min_confidence: float
    first_contact_gate: bool
    drift_demote_after: int
    canary_rate: float
    graduate_min_approvals: int
    graduate_min_age_hours: float
    auto_send_cap_per_day: int


class CategoryRiskDial(Shape):
    """A category's overrides (``null`` inherits the account default) and the values in force."""

    category_id: str
    min_confidence: float | None = None
    first_contact_gate: bool | None = None
    drift_demote_after: int | None = None
    canary_rate: float | None = None
    graduate_min_approvals: int | None = None
    graduate_min_age_hours: float | None = None
    auto_send_cap_per_day: int | None = None
    effective: RiskValues


class RiskDial(Shape):
    """``get_risk_dial``: the resolved brand-risk dial. Agents read it; the console sets it."""

    account: RiskValues
    categories: list[CategoryRiskDial] = Field(default_factory=list)


class NewRule(Shape):
    rule_text: str = Field(min_length=1, max_length=4000)
    scope: Literal["general", "category"]
    category_id: str | None = None


class ReviewerDecisionRequest(Shape):
    """A reviewer's decision; ``revision`` and ``version`` are the optimistic CAS."""

    action: Literal["approve", "edit", "reject", "escalate"]
    revision: int = Field(ge=1)
    version: int = Field(ge=1)
    subject: str | None = Field(default=None, max_length=998)
    body: str | None = Field(default=None, description="the new body_text, for an edit")
    feedback: str | None = Field(default=None, max_length=20000)
    new_rule: NewRule | None = Field(default=None, description="human reviewers only")


class ReviewerDecisionReview(Shape):
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


class ProblemError(Shape):
    """One recovery fact or bad field: ``field`` is a JSON pointer; ``code`` names the fact
    (``state``, ``revision``, ``version``, ``allowed_action``, ``sent_message_id``, ...).
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
    version: str
    stability: Literal["provisional"]
    kind: Literal["sdk+skill-contract"]
    core_shapes: list[str]
    shapes: list[str]
    skills: list[str]


SHAPES: tuple[type[BaseModel], ...] = (
    ReviewIntent,
    ReviewFeedback,
    DiffJson,
    DiffHunk,
    ReviewComment,
    Rule,
    RuleList,
    ReviewEvent,
    ReviewEventList,
    AckReviewEventsRequest,
    AckReviewEventsResult,
    Review,
    ReviewList,
    SubmitResult,
    ReviewChatRequest,
    Category,
    CategoryList,
    GraduationStatus,
    RiskValues,
    CategoryRiskDial,
    RiskDial,
    NewRule,
    ReviewerDecisionRequest,
    ReviewerDecisionResult,
    Problem,
    ContractManifest,
)


def component_schemas() -> dict[str, Any]:
    """Every shape as an OpenAPI 3.1 component schema, keyed by its model name."""
    from pydantic.json_schema import models_json_schema

    _, document = models_json_schema(
        [(model, "serialization") for model in SHAPES], ref_template="#/components/schemas/{model}"
    )
    schemas: dict[str, Any] = document.get("$defs", {})
    return schemas
