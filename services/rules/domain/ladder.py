"""The precedence ladder of spec 000 and the append-only lineage of a rule. Pure: no I/O.

``get_rules`` returns the effective stack with the ladder applied server-side:
per-agent project rule -> project category rule -> project general rule -> org house-style rule,
each rung ordered by priority (highest first), then by age (oldest lineage first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum, StrEnum


class Layer(StrEnum):
    ORG = "org"
    PROJECT = "project"


class Scope(StrEnum):
    GENERAL = "general"
    CATEGORY = "category"


class Kind(StrEnum):
    SOFT = "soft"
    HARD = "hard"


class State(StrEnum):
    """What a revision itself is. ``superseded`` is never stored: it is derived (no row is rewritten)."""

    PROPOSED = "proposed"
    ACTIVE = "active"
    RETIRED = "retired"


SUPERSEDED = "superseded"


class Action(StrEnum):
    CREATED = "created"
    REVISED = "revised"
    RETIRED = "retired"
    APPROVED = "approved"
    REJECTED = "rejected"
    UNDONE = "undone"


class Rung(IntEnum):
    """The ladder, top (wins) first."""

    AGENT = 0
    PROJECT_CATEGORY = 1
    PROJECT_GENERAL = 2
    HOUSE_STYLE = 3


# A revision in force is the last one that is not a pending proposal.
IN_FORCE = frozenset({State.ACTIVE, State.RETIRED})


@dataclass(frozen=True)
class RuleRev:
    """One stored revision of a lineage."""

    id: str
    lineage_id: str
    rev: int
    layer: Layer
    org_id: str
    project_id: str  # "" for an org house-style rule
    agent_id: str  # "" unless a per-agent project rule
    scope: Scope
    category_id: str  # "" for a general rule
    kind: Kind
    priority: int
    rule_text: str
    source_review_id: str
    author_kind: str
    state: State
    action: Action
    changed_by_kind: str
    changed_by_id: str
    high_water: int  # 0: this revision did not move the effective stack
    supersedes_id: str
    created_at: datetime


def rung_of(rule: RuleRev) -> Rung:
    if rule.layer is Layer.ORG:
        return Rung.HOUSE_STYLE
    if rule.agent_id:
        return Rung.AGENT
    return Rung.PROJECT_CATEGORY if rule.scope is Scope.CATEGORY else Rung.PROJECT_GENERAL


def applies(rule: RuleRev, *, org_id: str, project_id: str, agent_id: str, category_id: str) -> bool:
    """Is ``rule`` on the ladder of this ``{org, project, agent}``? With ``category_id`` empty, every
    category's rules are on it (the agent matches drafts to categories itself)."""
    if rule.org_id != org_id:
        return False
    if rule.layer is Layer.PROJECT and rule.project_id != project_id:
        return False
    if rule.agent_id and rule.agent_id != agent_id:
        return False
    return not (rule.scope is Scope.CATEGORY and category_id and rule.category_id != category_id)


def in_force(revisions: Sequence[RuleRev]) -> RuleRev | None:
    """The revision of one lineage that governs drafts now: the newest one that is not a pending
    proposal (a proposal on top waits for a human and leaves the previous revision in force)."""
    for revision in sorted(revisions, key=lambda r: r.rev, reverse=True):
        if revision.state in IN_FORCE:
            return revision
    return None


def status_of(revision: RuleRev, head_rev: int, in_force_rev: int | None) -> str:
    """The spec's status: the head and the revision in force report their own state; every other
    revision has been superseded."""
    if revision.rev == head_rev or revision.rev == in_force_rev:
        return revision.state.value
    return SUPERSEDED


def stack_order_key(rule: RuleRev) -> tuple[int, int, str]:
    return (rung_of(rule), -rule.priority, rule.lineage_id)


def effective_stack(
    revisions: Iterable[RuleRev], *, org_id: str, project_id: str, agent_id: str, category_id: str
) -> list[RuleRev]:
    """The ordered ladder: for each lineage its revision in force, if active and on this ladder."""
    lineages: dict[str, list[RuleRev]] = {}
    for revision in revisions:
        lineages.setdefault(revision.lineage_id, []).append(revision)
    stack = []
    for history in lineages.values():
        current = in_force(history)
        if (
            current is not None
            and current.state is State.ACTIVE
            and applies(
                current, org_id=org_id, project_id=project_id, agent_id=agent_id, category_id=category_id
            )
        ):
            stack.append(current)
    return sorted(stack, key=stack_order_key)
