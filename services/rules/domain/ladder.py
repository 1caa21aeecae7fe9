"""The precedence ladder of spec 000 and the append-only lineage of a rule. Pure: no I/O.

A write appends a revision (``next_revision``, ``restate``); nothing stored is ever rewritten.

``get_rules`` returns the effective stack with the ladder applied server-side:
per-agent project rule -> project category rule -> project general rule -> org house-style rule,
each rung ordered by priority (highest first), then by age (oldest lineage first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import IntEnum, StrEnum
from typing import TypeVar

from reviewloop.errors import Code, DomainError, invalid

from rules.domain.guardrails import normalize


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
    PROMOTED = "promoted"  # a category rule made general, or a project rule made org house style
    MERGED = "merged"  # its category was merged into another: the rule moved there


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
    source_turn_id: str = ""  # the review turn it was learnt from


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


def status_moved_at(revision: RuleRev, history: Sequence[RuleRev]) -> datetime:
    """When ``revision``'s status (``status_of``) last moved, given its lineage's ``history``: no row is
    ever rewritten, so it is the revision's own creation or the later one that superseded it. A proposal
    is superseded by the next revision; a revision in force by the next one that is in force too (a
    proposal on top leaves it in force)."""
    for later in sorted(history, key=lambda r: r.rev):
        if later.rev > revision.rev and (revision.state not in IN_FORCE or later.state in IN_FORCE):
            return later.created_at
    return revision.created_at


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


# --- writing a revision ------------------------------------------------------------------------

E = TypeVar("E", bound=StrEnum)


def parse_choice(enum: type[E], value: str, pointer: str, default: E) -> E:
    """``value`` as a member of ``enum`` (``default`` when empty), or ``bad_request`` at ``pointer``."""
    try:
        return enum(value or default)
    except ValueError:
        raise invalid(pointer, f"must be one of {', '.join(e.value for e in enum)}") from None


@dataclass(frozen=True)
class Draft:
    """A rule write, its text, kind and priority already checked. ``layer``, ``scope``,
    ``category_id`` and ``agent_id`` are as the writer gave them ("" = not given): a new lineage
    takes them (with their defaults); a revision inherits its lineage's and may only repeat them."""

    rule_text: str
    kind: Kind
    priority: int
    source_review_id: str = ""
    source_turn_id: str = ""
    layer: str = ""
    scope: str = ""
    category_id: str = ""
    agent_id: str = ""
    expected_rev: int = 0
    lineage_id: str = ""  # the lineage a revision names by a revision of it (``supersedes_id``)


@dataclass(frozen=True)
class Author:
    """Who writes a revision, as the lineage records it."""

    org_id: str
    project_id: str
    actor_kind: str  # recorded as changed_by_kind
    actor_id: str
    author_kind: str  # the SDK's author_kind: agent or human
    staged: bool = False  # staged approval: this author's project-layer writes are born proposed


def stale(head: RuleRev) -> DomainError:
    """A write against a rev that is no longer the lineage's head (read-before-write lost)."""
    return DomainError(
        Code.STALE,
        f"Lineage {head.lineage_id} is at rev {head.rev}; re-read it (get_rules or its history), re-apply "
        "your change and save against that rev.",
        state=head.state.value,
        revision=head.rev,
    )


@dataclass(frozen=True)
class _Place:
    """Where a revision sits: its lineage, rev and the scope every revision of a lineage shares."""

    lineage_id: str
    rev: int
    layer: Layer
    project_id: str
    agent_id: str
    scope: Scope
    category_id: str
    supersedes_id: str
    action: Action


def next_revision(
    head: RuleRev | None,
    draft: Draft,
    author: Author,
    *,
    rule_id: str,
    new_lineage_id: str,
    high_water: int,
    now: datetime,
) -> RuleRev:
    """The revision a rule write appends: rev 1 of a new lineage (``new_lineage_id``) when ``head``
    is None, else ``head.rev + 1`` of head's lineage, which keeps its layer, scope, category, agent
    and project. A staged author's project-layer revision is born ``proposed`` and stays out of the
    stack, so it does not take ``high_water``.

    Raises:
        DomainError: ``stale`` when ``draft.expected_rev`` is not the head's rev; ``bad_request``
            for a scope that contradicts itself or the lineage's; ``conflict`` when the revision
            would say what the head already says.
    """
    place = _new_lineage(draft, author, new_lineage_id) if head is None else _revision_of(head, draft)
    staged = author.staged and place.layer is Layer.PROJECT
    return RuleRev(
        id=rule_id,
        lineage_id=place.lineage_id,
        rev=place.rev,
        layer=place.layer,
        org_id=author.org_id,
        project_id=place.project_id,
        agent_id=place.agent_id,
        scope=place.scope,
        category_id=place.category_id,
        kind=draft.kind,
        priority=draft.priority,
        rule_text=draft.rule_text,
        source_review_id=draft.source_review_id,
        source_turn_id=draft.source_turn_id,
        author_kind=author.author_kind,
        state=State.PROPOSED if staged else State.ACTIVE,
        action=place.action,
        changed_by_kind=author.actor_kind,
        changed_by_id=author.actor_id,
        high_water=0 if staged else high_water,
        supersedes_id=place.supersedes_id,
        created_at=now,
    )


def _new_lineage(draft: Draft, author: Author, lineage_id: str) -> _Place:
    layer = parse_choice(Layer, draft.layer, "/rule_layer", Layer.PROJECT)
    scope = parse_choice(Scope, draft.scope, "/scope", Scope.CATEGORY if draft.category_id else Scope.GENERAL)
    if scope is Scope.CATEGORY and not draft.category_id:
        raise invalid("/category_id", "a category rule names its category")
    if scope is Scope.GENERAL and draft.category_id:
        raise invalid("/category_id", "a general rule has no category; use scope 'category'")
    if layer is Layer.ORG and (scope is Scope.CATEGORY or draft.agent_id):
        raise invalid("/scope", "org house style is general: no category, no agent")
    return _Place(
        lineage_id=lineage_id,
        rev=1,
        layer=layer,
        project_id="" if layer is Layer.ORG else author.project_id,
        agent_id=draft.agent_id,
        scope=scope,
        category_id=draft.category_id,
        supersedes_id="",
        action=Action.CREATED,
    )


def _revision_of(head: RuleRev, draft: Draft) -> _Place:
    if head.rev != draft.expected_rev:
        raise stale(head)
    for name, given, kept in (
        ("scope", draft.scope, head.scope.value),
        ("category_id", draft.category_id, head.category_id),
        ("rule_layer", draft.layer, head.layer.value),
        ("agent_id", draft.agent_id, head.agent_id),
    ):
        if given and given != kept:
            raise invalid(f"/{name}", "a revision keeps its lineage's; retire it and save a new rule")
    if (normalize(draft.rule_text), draft.kind, draft.priority) == (
        normalize(head.rule_text),
        head.kind,
        head.priority,
    ):
        raise DomainError(
            Code.CONFLICT,
            f"Revision {head.rev} of {head.lineage_id} already says this; nothing to save.",
            hints=(("rule_id", head.id), ("lineage_id", head.lineage_id)),
        )
    return _Place(
        lineage_id=head.lineage_id,
        rev=head.rev + 1,
        layer=head.layer,
        project_id=head.project_id,
        agent_id=head.agent_id,
        scope=head.scope,
        category_id=head.category_id,
        supersedes_id=head.id,
        action=Action.REVISED,
    )


def restate(
    history: Sequence[RuleRev],
    source: RuleRev,
    *,
    action: Action,
    state: State,
    author: Author,
    rule_id: str,
    high_water: int,
    now: datetime,
) -> RuleRev:
    """The console's lineage verbs (retire, undo, approve, reject) append a copy of ``source``'s
    content as the next rev, in ``state``. It takes ``high_water`` only when it changes what is in
    force and that is or was active: only then does the effective stack move."""
    head = history[-1]
    before = in_force(history)
    rule = replace(
        source,
        id=rule_id,
        rev=head.rev + 1,
        state=state,
        action=action,
        changed_by_kind=author.actor_kind,
        changed_by_id=author.actor_id,
        supersedes_id=head.id,
        created_at=now,
        high_water=0,
    )

    def placed(r: RuleRev) -> tuple[object, ...]:
        return (
            r.state,
            r.rule_text,
            r.kind,
            r.priority,
            r.layer,
            r.project_id,
            r.agent_id,
            r.scope,
            r.category_id,
        )

    moved = before is None or placed(before) != placed(rule)
    if moved and (state is State.ACTIVE or (before is not None and before.state is State.ACTIVE)):
        return replace(rule, high_water=high_water)
    return rule
