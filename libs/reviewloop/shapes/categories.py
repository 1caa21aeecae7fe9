"""Categories, graduation and pacing, and the risk dial."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
)

from reviewloop.ids import id_pattern
from reviewloop.shapes._base import (
    INT32_MAX,
    AuthorKind,
    CategoryName,
    CategoryState,
    Hours,
    Shape,
    Storable,
)

# --- categories and graduation ----------------------------------------------------------------------


class ProposeCategoryRequest(Shape):
    """``create_category``: an agent adds a category."""

    name: CategoryName
    description: str = Field(default="", max_length=2000)
    scope: Literal["", "org_shared", "agent_private", "project"] = Field(
        default="",
        description="Default: org_shared; agent_private (the SDK's name) and project are one scope.",
    )


class AdminCategoryIn(ProposeCategoryRequest):
    """``predefine_category``: the console adds a category, possibly locked from graduating."""

    never_graduate: bool = False


class UpdateCategoryRequest(Shape):
    """``update_category``: an absent field is untouched."""

    name: CategoryName | None = None
    description: str | None = Field(default=None, max_length=2000)
    never_graduate: bool | None = None


class ProposeGraduationRequest(Shape):
    """``propose_graduation``: the rung proposed, and why (a ``note``, and the SDK's opaque ``evidence``)."""

    to_state: CategoryState | Literal[""] = Field(default="", description="Default: the next rung.")
    note: str = Field(default="", max_length=2000)
    evidence: Annotated[dict[str, Any], Storable] | None = Field(
        default=None,
        description="Opaque structured evidence for the human, e.g. {approvals: 20, last_edits: 0}.",
    )


class MergeCategoriesRequest(Shape):
    """``merge_categories``: merge the path's category (retired) into ``into_category_id`` (it stays)."""

    into_category_id: str = Field(
        min_length=1, max_length=40, pattern=f"^{id_pattern('cat')}$", description="the category that stays"
    )
    rationale: str = Field(
        min_length=1, max_length=2000, description="why both describe the same reusable purpose"
    )


class GraduateIn(Shape):
    """``graduate_category``: the rung a human sets."""

    to_state: CategoryState


class Category(Shape):
    """An element of ``list_categories``: keyed on the opaque ``cat_`` id; name is display metadata."""

    id: str
    name: str
    description: str
    scope: Literal["org_shared", "agent_private"] = Field(
        description="org_shared: every project of the org; agent_private: this project's agents only"
    )
    state: CategoryState
    author_kind: AuthorKind
    rule_high_water: int
    rules_version: int
    never_graduate: bool
    clean_approval_count: int
    drift_count: int
    org_id: str | None = None
    project_id: str | None = None
    # Always served (the SDK requires both); optional here as for Rule.
    created_at: datetime | None = None
    updated_at: datetime | None = Field(
        default=None,
        description="when its record last changed: a rename, a description, the lock, a rung, a merge",
    )
    merged_into: str | None = Field(default=None, description="set once merged into that category (retired)")
    created_by_agent_id: str | None = Field(
        default=None, description="the agent that created it (absent for one the console predefined)"
    )


class CategoryAuditEntry(Shape):
    """One merge a category took part in: who merged which category into which, when, why, and what moved.

    An audit entry of its own, in the layout of ``RuleAuditEntry``.
    """

    id: str = Field(description="the cmg_ id of the merge")
    entity_kind: Literal["category"]
    entity_id: str = Field(description="the category merged away")
    action: Literal["merge"]
    actor_kind: str = Field(description="agent | admin: whose key merged")
    actor_id: str
    merged_from: str = Field(description="the category merged away (retired, its merged_into set)")
    merged_into: str = Field(description="the category that stays")
    rationale: str = Field(description="why both describe the same reusable purpose, verbatim")
    rules_moved: int
    rules_retired: int
    created_at: datetime


class CategoryAudit(Shape):
    """``get_category_audit``: the merges a category took part in, either side, oldest first."""

    items: list[CategoryAuditEntry]
    total: int


class CategoryMerge(Shape):
    """``merge_categories``: both categories as they now are, and what moved."""

    merged: Category = Field(description="the category merged away, its merged_into set")
    into: Category
    rules_moved: int = Field(description="rule lineages now in into (a new revision each)")
    rules_retired: int = Field(description="rules retired as twins of one already in into")
    audit: CategoryAuditEntry | None = Field(
        default=None, description="the merge's audit entry (absent only for a merge older than the audit)"
    )


class CategoryList(Shape):
    """``list_categories``: a page of categories (the SDK's ``Page<Category>``)."""

    items: list[Category]
    total: int
    next_cursor: str | None = None


class ScanBacklogStatus(Shape):
    """``get_backlog_status``: a category's queued drafts, current against its rules or stale.

    A draft is stale when it was composed (or last restamped) under an older rule high-water than the one
    now in force for its category; a redraft or an honest restamp makes it current again. Stale drafts are
    nudged a look-ahead window at a time (``in_flight``), ``next_review_ids`` after them.
    """

    category_id: str
    state: CategoryState
    queued: int = Field(description="drafts in the human queue (needs_review | in_review | chatting)")
    current_enough: int = Field(description="of the queued, composed under the rule high-water in force")
    stale: int = Field(description="of the queued, composed under an older rule high-water")
    current_category_rules_version: int
    current_house_style_version: int
    staleness_tolerance: int = Field(description="how many versions behind a draft may be: none")
    rule_high_water: int = Field(description="the high-water a draft must have been composed under")
    in_flight: int = Field(description="stale drafts nudged and awaiting their redraft or restamp")
    next_review_ids: list[str] = Field(description="the stale drafts to be nudged next, in order")


class PacingItem(Shape):
    """One queued draft's place against the review cursor and the window.

    ``in_window_redrafting``: stale and nudged (a look-ahead slot), awaiting its redraft or restamp;
    ``behind_cursor``: queued before the draft a human last decided (the human passed it over);
    ``ahead``: stale, waiting for a slot; ``in_window_fresh``: composed under the rules in force.
    """

    review_id: str
    state: Literal["behind_cursor", "in_window_fresh", "in_window_redrafting", "ahead"]
    rule_high_water: int = Field(description="the high-water the draft was composed under")
    required_high_water: int | None = Field(
        default=None, description="the high-water a redraft or restamp must reach (stale drafts only)"
    )
    rule_snapshot_named: bool = Field(
        default=True,
        description="false: its agent named no rule snapshot, so rule_high_water is the stack's when it was "
        "written, not rules it read (a fresh item may still predate rules its agent never applied)",
    )


class CategoryPacingState(Shape):
    """``get_pacing_state``: how a category's stale drafts are worked through, a look-ahead window at a time.

    A new rule never nudges the whole queue: at most ``lookahead_window`` stale drafts are nudged at once;
    the next slot opens as the agent redrafts or restamps one (or it leaves pending), and refills are at
    least ``nudge_min_interval_ms`` apart. Stale drafts are held from release until then.
    """

    category_id: str
    cursor_review_id: str | None = Field(
        default=None, description="the review cursor: the draft a human last decided; absent before the first"
    )
    cursor_advanced_count: int = Field(description="human decisions (approve, edit, reject) that moved it")
    lookahead_window: int
    rework_batch_max: int
    nudge_min_interval_ms: int
    queued: int = Field(description="drafts in the human queue (needs_review | in_review | chatting)")
    in_window: int = Field(description="of the queued, those fresh or being redrafted")
    redrafting: int = Field(description="of the in-window, the stale ones nudged and awaiting a redraft")
    items: list[PacingItem] = Field(description="every queued draft, oldest first")
    pending: int = Field(description="the queued drafts and the rejected ones (out of the human queue)")
    stale: int = Field(
        description="pending drafts (rejected ones too) composed under an older rule high-water than required"
    )
    released_count: int = Field(description="stale drafts the window released (redrafted, restamped, closed)")
    rule_high_water: int = Field(description="the highest high-water a stale draft must reach (0: none)")
    next_review_ids: list[str] = Field(description="the stale drafts to be nudged next, in order")
    last_nudged_at: datetime | None = None


class PacingValues(Shape):
    """A project's backlog pacing values in force (the risk dial's family)."""

    lookahead_window: int = Field(description="propagation nudges outstanding per category at a time")
    rework_batch_max: int = Field(description="the ceiling of any nudge's suggested_batch")
    nudge_min_interval_ms: int = Field(description="the least time between two refills of a category")


class PacingSettings(PacingValues):
    """``get_pacing_settings`` / ``set_pacing_settings``."""

    project_id: str


class PacingSettingsIn(Shape):
    """``set_pacing_settings``: an absent field is untouched, ``null`` returns it to the default."""

    lookahead_window: int | None = Field(default=None, ge=1, le=100)
    rework_batch_max: int | None = Field(default=None, ge=1, le=100)
    nudge_min_interval_ms: int | None = Field(default=None, ge=0, le=3_600_000)


class GraduationStatus(Shape):
    """``get_graduation_status``: read-only progress toward the next rung."""

    category_id: str
    state: CategoryState
    next_state: Literal["auto_notify", "auto_silent", ""] = Field(
        description="the rung a graduation would move to; empty at the top rung (the SDK's reading)"
    )
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
    """An agent's proposal of the next rung, and how a human decided it; with its category's status."""

    id: str
    category_id: str
    from_state: str
    to_state: str
    proposed_by: str
    note: str
    status: Literal["proposed", "approved", "rejected"] = Field(
        description="proposed: waiting for a human; approved: the category graduated to it; "
        "rejected: closed with `reason`, the category stays on its rung"
    )
    created_at: datetime
    graduation: GraduationStatus
    reason: str | None = Field(default=None, description="a rejection's reason, verbatim from the human")
    decided_by: str | None = None
    decided_at: datetime | None = None
    evidence: dict[str, Any] | None = Field(default=None, description="the proposing agent's, as it gave it")


class GraduationProposalList(Shape):
    """Graduation proposals, newest first."""

    proposals: list[GraduationProposal]


class RejectProposalIn(Shape):
    """``reject_graduation_proposal``: why, in words the proposing agent reads verbatim."""

    reason: str = Field(min_length=1, max_length=2000)


# --- the risk dial ----------------------------------------------------------------------------------


class DialValues(Shape):
    """Dial fields; an absent field is untouched, ``null`` inherits (or resets the account's)."""

    min_confidence: float | None = Field(default=None, ge=0, le=1)
    first_contact_gate: bool | None = None
    drift_demote_after: int | None = Field(default=None, ge=1, le=INT32_MAX)
    canary_rate: float | None = Field(default=None, ge=0, le=1)
    graduate_min_approvals: int | None = Field(default=None, ge=0, le=INT32_MAX)
    graduate_min_age_hours: float | None = Field(default=None, ge=0)
    auto_send_cap_per_day: int | None = Field(default=None, ge=0, le=INT32_MAX)
    quorum_approvals: int | None = Field(
        default=None,
        ge=1,
        le=INT32_MAX,
        description="distinct approvals of the current revision a draft needs",
    )
    quorum_review_agent: bool | None = Field(
        default=None, description="a review agent's approval counts as one of them"
    )
    review_deadline_minutes: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="a review agent's time to decide; 0: no deadline"
    )
    quorum_panel: int | None = Field(
        default=None,
        ge=0,
        le=INT32_MAX,
        description="at most this many distinct humans decide a draft (0: any number; at least quorum_approvals)",
    )


class CategoryDialIn(DialValues):
    """A category's dial overrides; ``null`` inherits the account's value."""

    category_id: str = Field(max_length=40, pattern=f"^{id_pattern('cat')}$")


class RiskDialIn(Shape):
    """``set_risk_dial``: account fields merge, each listed category's overrides are replaced."""

    account: DialValues | None = None
    categories: list[CategoryDialIn] = Field(default_factory=list, max_length=500)


class AccountRiskDial(Shape):
    """The account's dial: every value a category that overrides nothing inherits."""

    min_confidence: float
    first_contact_gate: bool
    drift_demote_after: int
    canary_rate: float
    graduate_min_approvals: int
    graduate_min_age_hours: Hours
    auto_send_cap_per_day: int
    quorum_approvals: int = Field(description="distinct approvals of the current revision a draft needs")
    quorum_review_agent: bool = Field(description="a review agent's approval counts as one of them")
    review_deadline_minutes: int = Field(
        description="minutes a review agent has to decide before the draft is forced to a human; 0: none"
    )
    quorum_panel: int = Field(description="at most this many distinct humans decide a draft; 0: any number")


class EffectiveRiskDial(AccountRiskDial):
    """A category's dial in force: the account's values with the category's overrides applied."""


class CategoryRiskDial(Shape):
    """A category's overrides (``null`` inherits the account default) and the values in force.

    ``get_risk_dial`` sends every override field, its value or ``null``, as the SDK's ``CategoryRiskDial``
    types it; a reader takes a row without them as the spec's example writes it (absent: inherits).
    """

    category_id: str
    min_confidence: float | None = None
    first_contact_gate: bool | None = None
    drift_demote_after: int | None = None
    canary_rate: float | None = None
    graduate_min_approvals: int | None = None
    graduate_min_age_hours: Hours | None = None
    auto_send_cap_per_day: int | None = None
    quorum_approvals: int | None = None
    quorum_review_agent: bool | None = None
    review_deadline_minutes: int | None = None
    quorum_panel: int | None = None
    effective: EffectiveRiskDial


class RiskDial(Shape):
    """``get_risk_dial``: the resolved brand-risk dial. Agents read it; the console sets it."""

    account: AccountRiskDial
    categories: list[CategoryRiskDial] = Field(default_factory=list)


class GateDial(Shape):
    """The values the auto-send gates read."""

    min_confidence: float
    first_contact_gate: bool
    canary_rate: float
    auto_send_cap_per_day: int


class DialOutcome(Shape):
    """The drafts auto-sent, and those held by reason, under one dial."""

    dial: GateDial
    auto_sent: int
    held: dict[str, int] = Field(default_factory=dict)


class DialEffect(Shape):
    """``get_dial_effect``: the dial in force and a proposed one over the last drafts; the edit rate."""

    category_id: str
    considered: int
    current: DialOutcome
    proposed: DialOutcome
    decided: int
    clean_streak: int
    edit_rate: float


RISK_DIAL_FIELDS: tuple[str, ...] = tuple(AccountRiskDial.model_fields)
