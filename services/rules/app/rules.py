"""Rule writes and reads of one lineage: save, the console's lineage verbs, history, staged approval.

Every write goes through ``save_rule`` or ``_lineage_action``: read-before-write on ``rev``
(``domain.ladder``), duplicate refusal, credential scanning and lint (``domain.guardrails``),
staged approval, and an outbox ``rule_changed`` whenever the effective stack moves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import has_prefix, new_id
from reviewloop.rules.v1.events_pb2 import BroadcastRequested, RuleChanged
from reviewloop.rules.v1.rules_pb2 import SaveRuleRequest
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.app.authority import HUMAN_AUTHORITY, author, require, require_house_style, writer
from rules.app.categories import check_category
from rules.app.env import NUDGE, REVIEW_STATE, Env, idempotent
from rules.domain import pacing
from rules.domain.guardrails import check_rule_text, normalize
from rules.domain.ladder import (
    Action,
    Draft,
    Kind,
    Layer,
    RuleRev,
    Scope,
    State,
    in_force,
    next_revision,
    parse_choice,
    restate,
    stale,
    status_moved_at,
    status_of,
)
from rules.domain.proposal import conflicts

log = logging.getLogger(__name__)

PRIORITY_RANGE = (-1000, 1000)


@dataclass(frozen=True)
class RuleView:
    """A revision as the API shows it: the stored revision plus its derived status, and when that
    status last moved (None: never since it was created)."""

    rule: RuleRev
    status: str
    updated_at: datetime | None = None


@dataclass(frozen=True)
class RuleInput:
    """A ``save_rule`` request as the writer sent it."""

    rule_text: str
    scope: str = ""
    category_id: str = ""
    kind: str = ""
    priority: int = 0
    lineage_id: str = ""
    expected_rev: int = 0
    supersedes_id: str = ""  # the SDK's way to revise: the revision replaced (the lineage's head)
    source_review_id: str = ""
    source_turn_id: str = ""  # the turn of source_review_id it was learnt from (checked by its owner)
    rule_layer: str = ""
    agent_id: str = ""
    idempotency_key: str = ""
    rule_id: str = ""  # chosen by a caller that names the rule before it exists (a decision's new rule)
    dry_run: bool = False  # check everything a save checks, write nothing
    # The SDK's retro-propagation: nudge the pending drafts the rule makes stale (paced by review_state),
    # each suggesting this batch (0: the look-ahead window). Off, the drafts are only held from release.
    propagate_to_pending: bool = True
    suggested_batch: int = 0


def _rule_not_found(lineage_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No rule lineage {lineage_id} is visible to this key.")


def visible_lineage(principal: Principal, revisions: list[RuleRev], lineage_id: str) -> list[RuleRev]:
    """``revisions`` of one lineage (oldest first) if the principal may see it, else ``not_found``."""
    if not revisions:
        raise _rule_not_found(lineage_id)
    head = revisions[-1]
    if head.layer is Layer.PROJECT and head.project_id != principal.project_id:
        raise _rule_not_found(lineage_id)
    return revisions


def view_of(revisions: list[RuleRev], revision: RuleRev) -> RuleView:
    current = in_force(revisions)
    status = status_of(revision, revisions[-1].rev, current.rev if current else None)
    return RuleView(revision, status, status_moved_at(revision, revisions))


def _emit_rule_changed(
    uow: UnitOfWork, rule: RuleRev, propagate: bool = True, suggested_batch: int = 0, withdrawn: bool = False
) -> None:
    """Tell review_state (it nudges the drafts in scope) and, as a broadcast, every agent the rule
    governs: an agent with no draft pending composes its next one under the new stack."""
    changed = RuleChanged.ChangedRule(
        id=rule.id,
        lineage_id=rule.lineage_id,
        rev=rule.rev,
        rule_text=rule.rule_text,
        status=rule.state.value,
        action=rule.action.value,
    )
    uow.emit(
        REVIEW_STATE,
        rule.org_id,  # one aggregate per org: review_state sees the high-water rise in order
        "rule_changed",
        RuleChanged(
            org_id=rule.org_id,
            project_id=rule.project_id,
            scope=rule.scope.value,
            category_id=rule.category_id,
            agent_id=rule.agent_id,
            rule=changed,
            rule_high_water=rule.high_water,
            propagate_to_pending=propagate,
            suggested_batch=suggested_batch,
            withdrawn=withdrawn,
        ),
    )
    uow.emit(
        NUDGE,
        rule.org_id,
        "broadcast",
        BroadcastRequested(
            org_id=rule.org_id,
            project_id=rule.project_id,
            agent_id=rule.agent_id,
            category_id=rule.category_id,
            rule_changed=BroadcastRequested.RuleMoved(
                scope=rule.scope.value, rule=changed, rule_high_water=rule.high_water
            ),
        ),
    )


def duplicate_of(candidate: RuleRev, revisions: list[RuleRev]) -> RuleRev | None:
    """An active or proposed rule of another lineage with the same normalized text in the same scope."""
    return next((c.rule for c in conflicts(candidate, revisions) if c.kind == "duplicate"), None)


def checked_draft(principal: Principal, body: RuleInput) -> Draft:
    """``body``'s fields, each checked; what depends on the lineage is ``next_revision``'s."""
    layer = parse_choice(Layer, body.rule_layer, "/rule_layer", Layer.PROJECT)
    if layer is Layer.ORG:
        require_house_style(principal)
    text = check_rule_text(body.rule_text)
    kind = parse_choice(Kind, body.kind, "/kind", Kind.SOFT)
    if not PRIORITY_RANGE[0] <= body.priority <= PRIORITY_RANGE[1]:
        raise invalid("/priority", f"must be between {PRIORITY_RANGE[0]} and {PRIORITY_RANGE[1]}")
    if body.rule_id and not has_prefix(body.rule_id, "rule"):
        raise invalid("/rule_id", "must be a rule id (rule_...)")
    if body.source_review_id and not has_prefix(body.source_review_id, "rr"):
        raise invalid("/source_review_id", "must be a review id (rr_...)")
    if body.source_turn_id and not (has_prefix(body.source_turn_id, "turn") and body.source_review_id):
        raise invalid("/source_turn_id", "must be a turn id (turn_...) of the rule's source_review_id")
    agent_id = body.agent_id
    if principal.actor_kind is ActorKind.AGENT and agent_id and agent_id != principal.actor_id:
        raise DomainError(Code.FORBIDDEN_SCOPE, "An agent may write per-agent rules for itself only.")
    if agent_id and not has_prefix(agent_id, "agt"):
        raise invalid("/agent_id", "must be an agent id (agt_...)")
    if body.supersedes_id and not has_prefix(body.supersedes_id, "rule"):
        raise invalid("/supersedes_id", "must be the id (rule_...) of the revision this save replaces")
    if body.lineage_id and body.expected_rev < 1 and not body.supersedes_id:
        raise invalid("/expected_rev", "name the rev you read (read-before-write); get_rules shows it")
    if not body.lineage_id and not body.supersedes_id and body.expected_rev:
        raise invalid("/lineage_id", "expected_rev revises a lineage; name its lineage_id")
    if not 0 <= body.suggested_batch <= pacing.BATCH_LIMIT:
        raise invalid(
            "/suggested_batch", f"must be between 0 and {pacing.BATCH_LIMIT} (0: the look-ahead window)"
        )
    return Draft(
        rule_text=text,
        kind=kind,
        priority=body.priority,
        source_review_id=body.source_review_id,
        source_turn_id=body.source_turn_id,
        layer=body.rule_layer,
        scope=body.scope,
        category_id=body.category_id,
        agent_id=agent_id,
        expected_rev=body.expected_rev,
    )


class _DryRun(Exception):
    """Rolls a dry run's unit of work back once every check passed."""


async def save_rule(env: Env, principal: Principal, body: RuleInput) -> RuleView | None:
    """Create a lineage or revise one (``lineage_id`` + the ``expected_rev`` read). Agents write the
    project layer only; with the project's write_approval on, their rules are born ``proposed``.
    ``dry_run`` runs every check in a unit of work it rolls back, and answers None."""
    draft = checked_draft(principal, body)

    async def act(uow: UnitOfWork) -> str:
        return await _write(uow, principal, body, draft)

    if body.dry_run:
        try:
            async with env.db.transaction() as uow:
                await act(uow)
                raise _DryRun
        except _DryRun:
            return None
    fields = {"verb": "save_rule", **asdict(body)}
    fields.pop("idempotency_key")
    rule_id = await idempotent(env, principal, body.idempotency_key, fields, act)
    return await _rule_by_id(env, principal, rule_id)


async def _write(uow: UnitOfWork, principal: Principal, body: RuleInput, draft: Draft) -> str:
    """Append the revision ``body`` asks for in ``uow``; its id."""
    conn = uow.conn
    high_water = await store.bump_high_water(conn, principal.org_id)  # also the org's write lock
    head = None
    if body.supersedes_id:
        draft = await _superseding(conn, principal, body, draft)
    lineage_id = body.lineage_id or draft.lineage_id
    if lineage_id:
        history = visible_lineage(
            principal, await store.lineage(conn, principal.org_id, lineage_id), lineage_id
        )
        head = history[-1]
        if head.layer is Layer.ORG:
            require_house_style(principal)
    rule = next_revision(
        head,
        draft,
        await writer(conn, principal),
        rule_id=body.rule_id or new_id("rule"),
        new_lineage_id=new_id("rln"),
        high_water=high_water,
        now=utcnow(),
    )
    if head is None and rule.category_id:
        await check_category(conn, principal, rule.category_id)
    await _refuse_duplicate(uow, principal, rule)
    await append_revision(uow, rule, body.propagate_to_pending, body.suggested_batch)
    return rule.id


async def _superseding(conn: AsyncConnection, principal: Principal, body: RuleInput, draft: Draft) -> Draft:
    """``draft`` revising the lineage of the revision ``supersedes_id`` names, against that revision's rev:
    the read-before-write of ``lineage_id`` + ``expected_rev``, so a revision that is no longer its
    lineage's head is ``stale`` (``next_revision``). Named beside them, both must name the same revision."""
    lineage_id = await store.rule_lineage_of(conn, body.supersedes_id)
    history = await store.lineage(conn, principal.org_id, lineage_id) if lineage_id else []
    named = next((r for r in history if r.id == body.supersedes_id), None)
    if named is None:
        raise DomainError(Code.NOT_FOUND, f"No rule {body.supersedes_id} is visible to this key.")
    visible_lineage(principal, history, named.lineage_id)  # another project's is not_found
    if (body.lineage_id and body.lineage_id != named.lineage_id) or (
        body.expected_rev and body.expected_rev != named.rev
    ):
        raise invalid(
            "/supersedes_id",
            f"names rev {named.rev} of {named.lineage_id}, not what lineage_id and expected_rev name; "
            "give one of the two",
        )
    return replace(draft, lineage_id=named.lineage_id, expected_rev=named.rev)


async def _refuse_duplicate(uow: UnitOfWork, principal: Principal, rule: RuleRev) -> None:
    """``conflict`` when another lineage already says what ``rule`` says in its scope."""
    duplicate = duplicate_of(
        rule, await store.revisions_on_ladder(uow.conn, principal.org_id, principal.project_id)
    )
    if duplicate is not None:
        raise DomainError(
            Code.CONFLICT,
            f"Rule {duplicate.id} (lineage {duplicate.lineage_id}, rev {duplicate.rev}) already says "
            "this in the same scope; revise that one instead.",
            hints=(("rule_id", duplicate.id), ("lineage_id", duplicate.lineage_id)),
        )


async def save_requested(uow: UnitOfWork, request: SaveRuleRequest) -> None:
    """A decision's new rule, from review_state's outbox once the decision committed (the inbox runs it
    once). The decision checked it with a dry run; a rule saved since with the same text keeps the
    lineage it has (logged), since refusing the event would only hold back the review's later ones."""
    principal = Principal.from_proto(request.principal)
    body = RuleInput(
        rule_text=request.rule_text,
        scope=request.scope,
        category_id=request.category_id,
        source_review_id=request.source_review_id,
        source_turn_id=request.source_turn_id,
        rule_layer=request.rule_layer,
        agent_id=request.agent_id,
        rule_id=request.rule_id,
    )
    try:
        async with uow.conn.begin_nested():
            await _write(uow, principal, body, checked_draft(principal, body))
    except DomainError as error:
        log.warning("the new rule of review %s was not saved: %s", request.source_review_id, error)


async def append_revision(
    uow: UnitOfWork, rule: RuleRev, propagate: bool = True, suggested_batch: int = 0, withdrawn: bool = False
) -> None:
    """Append one revision; a lost race on (lineage, rev) is ``stale``. Publishes ``rule_changed``
    when the revision moved the effective stack (``withdrawn``: taken back with its decision)."""
    try:
        await store.add_revision(uow.conn, rule, normalize(rule.rule_text))
    except IntegrityError:
        raise DomainError(
            Code.STALE,
            f"Another writer saved rev {rule.rev} of {rule.lineage_id} first; re-read it and retry.",
            revision=rule.rev,
        ) from None
    if rule.high_water:
        _emit_rule_changed(uow, rule, propagate, suggested_batch, withdrawn)


async def _rule_by_id(env: Env, principal: Principal, rule_id: str) -> RuleView:
    async with env.db.engine.connect() as conn:
        owner = await store.rule_lineage_of(conn, rule_id)
        history = await store.lineage(conn, principal.org_id, owner) if owner else []
    for revision in history:
        if revision.id == rule_id:
            return view_of(history, revision)
    raise DomainError(Code.NOT_FOUND, f"No rule {rule_id} is visible to this key.")


# What a console lineage verb decides from the lineage's history: the revision whose content the
# new rev copies, the action and the new state; or the refusal.
Decision = tuple[RuleRev, Action, State] | DomainError


async def _lineage_action(
    env: Env,
    principal: Principal,
    lineage_id: str,
    expected_rev: int,
    decide: Callable[[list[RuleRev]], Decision],
    *,
    agent_may: bool = False,
    idempotency_key: str = "",
) -> RuleView:
    """The lineage verbs: CAS on the head rev, then append the revision ``decide`` names. Approving and
    rejecting are the console's; an agent may retire or undo a project rule (``agent_may``), as it may
    write one, unless staged approval holds its rule changes for a human."""
    kinds = (*HUMAN_AUTHORITY, ActorKind.AGENT) if agent_may else HUMAN_AUTHORITY
    require(principal, kinds, "Changing a rule's status")
    if expected_rev < 1:
        raise invalid("/rev", "name the rev you read (read-before-write)")

    async def act(uow: UnitOfWork) -> str:
        high_water = await store.bump_high_water(uow.conn, principal.org_id)
        history = visible_lineage(
            principal, await store.lineage(uow.conn, principal.org_id, lineage_id), lineage_id
        )
        head = history[-1]
        if head.layer is Layer.ORG:
            require_house_style(principal)
        if head.rev != expected_rev:
            raise stale(head)
        if principal.actor_kind is ActorKind.AGENT and await store.write_approval(
            uow.conn, principal.project_id
        ):
            # A retire or undo cannot be staged as a proposal: under staged approval it is the console's.
            raise DomainError(
                Code.FORBIDDEN_SCOPE,
                "Staged approval holds this project's agent rule changes; a retire or undo is the console's.",
            )
        decided = decide(history)
        if isinstance(decided, DomainError):
            raise decided
        source, action, state = decided
        rule = restate(
            history,
            source,
            action=action,
            state=state,
            author=author(principal),
            rule_id=new_id("rule"),
            high_water=high_water,
            now=utcnow(),
        )
        if rule.layer is not head.layer:  # a promotion to house style must not twin an org rule
            await _refuse_duplicate(uow, principal, rule)
        await append_revision(uow, rule)
        return rule.id

    # A retry with the same key answers the revision it wrote (a CAS alone would answer ``stale``).
    fields = {"verb": decide.__qualname__, "lineage_id": lineage_id, "expected_rev": expected_rev}
    return await _rule_by_id(env, principal, await idempotent(env, principal, idempotency_key, fields, act))


def _unless_proposed(decide: Callable[[list[RuleRev]], Decision]) -> Callable[[list[RuleRev]], Decision]:
    """``decide``, refused while the lineage's head is a pending proposal (it is approved or rejected first)."""

    def guarded(history: list[RuleRev]) -> Decision:
        head = history[-1]
        if head.state is State.PROPOSED:
            return DomainError(
                Code.WRONG_STATE,
                f"Rev {head.rev} of {head.lineage_id} is a pending proposal; approve or reject it first.",
                state=State.PROPOSED.value,
                revision=head.rev,
                allowed_actions=("approve_rule", "reject_rule"),
            )
        return decide(history)

    return guarded


def _nothing_proposed(head: RuleRev) -> DomainError:
    return DomainError(
        Code.WRONG_STATE,
        f"Rev {head.rev} of {head.lineage_id} is {head.state}; only a proposed revision is approved or rejected.",
        state=head.state.value,
        revision=head.rev,
    )


async def retire_rule(
    env: Env, principal: Principal, lineage_id: str, expected_rev: int, idempotency_key: str = ""
) -> RuleView:
    @_unless_proposed
    def decide(history: list[RuleRev]) -> Decision:
        if history[-1].state is State.RETIRED:
            return DomainError(
                Code.WRONG_STATE,
                f"{lineage_id} is already retired.",
                state="retired",
                revision=history[-1].rev,
            )
        return history[-1], Action.RETIRED, State.RETIRED

    return await _lineage_action(
        env, principal, lineage_id, expected_rev, decide, agent_may=True, idempotency_key=idempotency_key
    )


async def undo_rule(
    env: Env, principal: Principal, lineage_id: str, expected_rev: int, idempotency_key: str = ""
) -> RuleView:
    """Restore the revision in force before the last change (undoing a creation retires the rule)."""

    @_unless_proposed
    def decide(history: list[RuleRev]) -> Decision:
        current = in_force(history)
        assert current is not None  # the head is in force when no proposal is pending
        previous = in_force([r for r in history if r.rev < current.rev])
        if previous is None:
            return current, Action.UNDONE, State.RETIRED
        return previous, Action.UNDONE, previous.state

    return await _lineage_action(
        env, principal, lineage_id, expected_rev, decide, agent_may=True, idempotency_key=idempotency_key
    )


async def promote_rule(
    env: Env,
    principal: Principal,
    lineage_id: str,
    expected_rev: int,
    idempotency_key: str = "",
    to_layer: str = "",
) -> RuleView:
    """Promote a rule in force (the same lineage, a new revision). By default a category rule becomes
    general: every category's drafts now compose under it (same authority as retiring it). With
    ``to_layer`` ``org`` a project rule becomes org house style: general, no agent, inherited by every
    project of the org; that is console authority (an admin key)."""
    house_style = parse_choice(Layer, to_layer, "/to_layer", Layer.PROJECT) is Layer.ORG
    if house_style:
        require_house_style(principal)

    @_unless_proposed
    def promote(history: list[RuleRev]) -> Decision:
        head = history[-1]
        # What the head must be (an active project rule, or category rule) and the revision it becomes.
        now: Layer | Scope
        needed: Layer | Scope
        if house_style:
            now, needed, target = head.layer, Layer.PROJECT, "house style"
            promoted = replace(
                head, layer=Layer.ORG, project_id="", agent_id="", scope=Scope.GENERAL, category_id=""
            )
        else:
            now, needed, target = head.scope, Scope.CATEGORY, "general"
            promoted = replace(head, scope=Scope.GENERAL, category_id="")
        if head.state is not State.ACTIVE or now is not needed:
            return DomainError(
                Code.WRONG_STATE,
                f"Rev {head.rev} of {lineage_id} is a {head.state} {now} rule; only an active "
                f"{needed} rule is promoted to {target}.",
                state=head.state.value,
                revision=head.rev,
            )
        return promoted, Action.PROMOTED, State.ACTIVE

    return await _lineage_action(
        env,
        principal,
        lineage_id,
        expected_rev,
        promote,
        agent_may=not house_style,
        idempotency_key=idempotency_key,
    )


async def approve_rule(env: Env, principal: Principal, lineage_id: str, expected_rev: int) -> RuleView:
    def decide(history: list[RuleRev]) -> Decision:
        if history[-1].state is not State.PROPOSED:
            return _nothing_proposed(history[-1])
        return history[-1], Action.APPROVED, State.ACTIVE

    return await _lineage_action(env, principal, lineage_id, expected_rev, decide)


async def reject_rule(env: Env, principal: Principal, lineage_id: str, expected_rev: int) -> RuleView:
    """Refuse a proposal: the revision in force before it stays in force (a new, unmoving rev)."""

    def decide(history: list[RuleRev]) -> Decision:
        if history[-1].state is not State.PROPOSED:
            return _nothing_proposed(history[-1])
        current = in_force(history)
        if current is None:
            return history[-1], Action.REJECTED, State.RETIRED
        return current, Action.REJECTED, current.state

    return await _lineage_action(env, principal, lineage_id, expected_rev, decide)


async def rule_history(env: Env, principal: Principal, lineage_id: str) -> list[RuleView]:
    async with env.db.engine.connect() as conn:
        history = visible_lineage(
            principal, await store.lineage(conn, principal.org_id, lineage_id), lineage_id
        )
    return [view_of(history, r) for r in history]


async def get_rule_settings(env: Env, principal: Principal) -> bool:
    async with env.db.engine.connect() as conn:
        return await store.write_approval(conn, principal.project_id)


async def set_rule_settings(env: Env, principal: Principal, write_approval: bool) -> bool:
    require(principal, (ActorKind.ADMIN,), "Setting staged approval")
    async with env.db.transaction() as uow:
        await store.set_write_approval(uow.conn, principal.org_id, principal.project_id, write_approval)
    return write_approval
