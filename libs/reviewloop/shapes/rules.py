"""Rules: saving, learning, promoting, their history and audit, the settings and composition key (categories, graduation and the risk dial: categories.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    Field,
)

from reviewloop.ids import id_pattern
from reviewloop.shapes._base import (
    INT64_MAX,
    MAX_BODY_TEXT,
    MAX_RULE_BODY,
    MAX_RULE_CHARS,
    SPACE,
    AuthorKind,
    Shape,
    id_or_empty,
)

# The rules service lints a rule's text (rules.domain.guardrails) and says what is wrong in its own words,
# so the edge only bounds the body; the document publishes the lint's limits: 8 to 2000 characters once
# stripped, no NUL.
MIN_RULE_CHARS = 8
RuleText = Annotated[
    str,
    Field(
        max_length=MAX_RULE_BODY,
        json_schema_extra={
            "minLength": MIN_RULE_CHARS,
            "maxLength": MAX_RULE_CHARS,
            "pattern": rf"^[{SPACE}]*[^\x00{SPACE}][^\x00]{{{MIN_RULE_CHARS - 2},}}[^\x00{SPACE}][{SPACE}]*$",
        },
    ),
]
RuleKind = Literal["", "soft", "hard"]
RuleScope = Literal["", "general", "category"]
PRIORITY = Field(default=0, ge=-1000, le=1000)  # rules.app.rules.PRIORITY_RANGE

# --- rules ------------------------------------------------------------------------------------------


class SaveRuleRequest(Shape):
    """save_rule: a new lineage, or a revision of one naming the rev it read."""

    rule_text: RuleText
    scope: RuleScope = ""
    category_id: str = id_or_empty("cat")
    kind: RuleKind = ""
    priority: int = PRIORITY
    lineage_id: str = id_or_empty("rln")
    expected_rev: int = Field(default=0, ge=0, le=INT64_MAX)
    supersedes_id: str = Field(
        default="",
        max_length=40,
        pattern=f"^({id_pattern('rule')})?$",
        description="The SDK's way to revise: the rule_ id of the revision this save replaces. It must still "
        "be its lineage's current revision (else 409 stale, nothing written), as lineage_id + expected_rev; "
        "given beside them, all must name the same revision (else 422).",
    )
    source_review_id: str = id_or_empty("rr")
    source_turn_id: str = Field(
        default="",
        max_length=40,
        pattern=f"^({id_pattern('turn')})?$",
        description="the turn of source_review_id the rule was learnt from",
    )
    agent_id: str = id_or_empty("agt")
    scope_agent_id: str = Field(
        default="",
        max_length=40,
        pattern=f"^({id_pattern('agt')})?$",
        description="the SDK's name for agent_id: a per-agent rule (your own agent)",
    )
    propagate_to_pending: bool = Field(
        default=True,
        description="Nudge the pending drafts the rule leaves stale, a look-ahead window per category at a "
        "time (false: they are only held from release until redrafted or restamped).",
    )
    suggested_batch: int = Field(
        default=0,
        ge=0,
        le=100,
        description="The batch each propagation nudge suggests; 0: the look-ahead window. Never above the "
        "project's rework_batch_max.",
    )


class LearnReviewRuleRequest(Shape):
    """``learn_review_rule``: a rule the agent drew from a review's diff and comments."""

    rule_text: RuleText
    scope: RuleScope = Field(default="", description="Default: the review's category, else general.")
    category_id: str = id_or_empty("cat")
    turn_id: str = Field(
        default="",
        max_length=40,
        pattern=f"^({id_pattern('turn')})?$",
        description="The review turn it was learnt from.",
    )
    kind: RuleKind = ""


class HouseRuleIn(Shape):
    """``save_house_style_rule``: an org rule, new or a revision of ``lineage_id``."""

    rule_text: RuleText
    kind: RuleKind = ""
    priority: int = PRIORITY
    lineage_id: str = id_or_empty("rln")
    expected_rev: int = Field(default=0, ge=0, le=INT64_MAX)


class RevIn(Shape):
    """A rule lineage verb (undo, approve, reject, retire) names the rev it read."""

    rev: int = Field(ge=1, le=INT64_MAX, description="The lineage's current rev, as you read it.")


class PromoteRuleRequest(RevIn):
    """``promote_rule``: a category rule to general (the default), or a project rule to org house style."""

    to_layer: Literal["project", "org"] = Field(
        default="project",
        description="org: the rule becomes org house style (general, every project of the org); an admin key",
    )
    to_scope: Literal["general"] = Field(
        default="general", description="the catalog's argument: a promotion always lands on a general rule"
    )


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
    source_turn_id: str | None = Field(default=None, description="the review turn it was learnt from")
    author_kind: AuthorKind
    status: Literal["proposed", "active", "superseded", "retired"]
    agent_id: str | None = None
    scope_agent_id: str | None = Field(default=None, description="the SDK's name for agent_id")
    supersedes_id: str | None = None
    # Always served (the SDK requires both); optional here so the spec's canonical example, which omits
    # them, still reads.
    created_at: datetime | None = None
    updated_at: datetime | None = Field(
        default=None,
        description="when its status last moved (a later revision superseded it); else created_at",
    )


class RuleSnapshot(Shape):
    """``get_rules`` (the SDK's ``RuleSnapshot``): the ordered effective ladder.

    Unfiltered, it carries the composition token.
    """

    items: list[Rule]
    total: int
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


class RuleAuditEntry(Shape):
    """One change of a rule lineage, as the catalog's ``get_rule_audit`` reads it (the SDK's type)."""

    id: str = Field(description="the rule_ revision the change produced")
    entity_kind: Literal["rule"]
    entity_id: str = Field(description="the rln_ lineage")
    action: str = Field(
        description="create | supersede | retire | restore (the SDK's names); approve | reject (ours, no SDK name)"
    )
    actor_kind: str = Field(
        description="agent | human | system (the SDK's): an admin (the console) is human, a review agent an agent"
    )
    actor_id: str | None = None
    before_json: str | None = Field(default=None, description="the revision before, as JSON")
    after_json: str = Field(description="this revision, as JSON")
    undone: bool = Field(description="a later undo restored the revision before this one")
    created_at: datetime


class RuleAudit(Shape):
    """``get_rule_audit``: a lineage's changes, oldest first."""

    items: list[RuleAuditEntry]
    total: int


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


# --- a rule before it is saved (issue 38) ---------------------------------------------------------------


class RulePreviewIn(Shape):
    """``preview_rule_from_edit``: an edit of the draft, and the rule (empty: the proposed one)."""

    subject: str | None = Field(default=None, max_length=998)
    body: str = Field(max_length=MAX_BODY_TEXT)
    rule_text: str = Field(default="", max_length=MAX_RULE_BODY)
    scope: Literal["house", "general", "category", "agent"] = "general"


class WordChange(Shape):
    """A changed run of words of the edit."""

    field: Literal["subject", "body_text"]
    op: Literal["replace", "insert", "delete"]
    before: str
    after: str


class RuleConflict(Shape):
    """A live rule of the same scope it may conflict with."""

    kind: Literal["duplicate", "contradiction", "overlap"]
    rule: Rule


class ReachedDraft(Shape):
    """A pending draft the rule would hold; ``summary`` is its intent's."""

    review_id: str
    summary: str
    state: str
    agent_id: str
    category_id: str


class RulePreview(Shape):
    """``preview_rule_from_edit``: nothing is written."""

    review_id: str
    scope: Literal["house", "general", "category", "agent"]
    changes: list[WordChange]
    proposed_text: str
    rule_text: str
    conflicts: list[RuleConflict]
    held_count: int
    held: list[ReachedDraft]
