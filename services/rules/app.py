"""rules use cases: one function per RPC, one transaction each.

Every rule write (agent, human, console) goes through ``_write``: read-before-write on ``rev``,
duplicate refusal, credential scanning and lint (``domain.guardrails``), staged approval, and an
outbox ``rule_changed`` whenever the effective stack moves.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import has_prefix, new_id
from reviewloop.storage import Database, UnitOfWork, first_delivery, utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.domain import graduation, risk
from rules.domain import token as tokens
from rules.domain.graduation import Outcome
from rules.domain.graduation import Rung as Grad
from rules.domain.guardrails import check_rule_text, normalize
from rules.domain.ladder import (
    Action,
    Kind,
    Layer,
    RuleRev,
    Scope,
    State,
    applies,
    effective_stack,
    in_force,
    stack_order_key,
    status_of,
)
from rules.store import CategoryRow

log = logging.getLogger(__name__)

REVIEW_STATE = "review_state"  # the outbox destination that learns of rule and category changes
DEFAULT_TOKEN_TTL_S = 15 * 60
PRIORITY_RANGE = (-1000, 1000)
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200
CATEGORY_SCOPES = ("org_shared", "project")


@dataclass(frozen=True)
class Settings:
    """What the use cases read from the environment, once at boot."""

    token_ttl_s: int = DEFAULT_TOKEN_TTL_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        raw = env.get("REVIEWLOOP_COMPOSITION_TOKEN_TTL_S", "")
        return cls(token_ttl_s=int(raw) if raw.strip() else DEFAULT_TOKEN_TTL_S)


# --- who may do what ---------------------------------------------------------------------------

HUMAN_AUTHORITY = (ActorKind.ADMIN, ActorKind.HUMAN)


def _author_kind(principal: Principal) -> str:
    # The console is a human acting; the spec's author_kind has no "admin".
    return "human" if principal.actor_kind in HUMAN_AUTHORITY else principal.actor_kind.value


def _require(principal: Principal, kinds: Sequence[ActorKind], what: str) -> None:
    if principal.actor_kind not in kinds:
        raise DomainError(
            Code.FORBIDDEN_ACTOR,
            f"{what} is human authority (a console action); a {principal.actor_kind} key cannot do it.",
        )


def _request_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def _idempotent(
    db: Database,
    principal: Principal,
    key: str,
    fields: dict[str, Any],
    act: Callable[[UnitOfWork], Awaitable[str]],
) -> str:
    """Run ``act`` (which returns the id it wrote) once per Idempotency-Key; a retry with the same
    body gets the same id, the same key with another body is ``idempotency_conflict``."""
    if not key:
        async with db.transaction() as uow:
            return await act(uow)
    request_hash = _request_hash(fields)
    for _ in range(2):  # a concurrent twin may win the key's insert; the second pass then reads it
        try:
            async with db.transaction() as uow:
                seen = await store.find_idempotent(uow.conn, principal.project_id, principal.actor_id, key)
                if seen is not None:
                    if seen.request_hash != request_hash:
                        raise DomainError(
                            Code.IDEMPOTENCY_CONFLICT,
                            "This Idempotency-Key was already used with a different request body; "
                            "use a new key for a new request.",
                        )
                    return str(seen.result_id)
                result_id = await act(uow)
                await store.remember_idempotent(
                    uow.conn, principal.project_id, principal.actor_id, key, request_hash, result_id
                )
                return result_id
        except IntegrityError:
            continue
    raise DomainError(Code.CONFLICT, "A concurrent request with this Idempotency-Key is in flight; retry.")


# --- rules -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleView:
    """A revision as the API shows it: the stored revision plus its derived status."""

    rule: RuleRev
    status: str


@dataclass(frozen=True)
class RuleInput:
    rule_text: str
    scope: str = ""
    category_id: str = ""
    kind: str = ""
    priority: int = 0
    lineage_id: str = ""
    expected_rev: int = 0
    source_review_id: str = ""
    rule_layer: str = ""
    agent_id: str = ""
    idempotency_key: str = ""


@dataclass(frozen=True)
class Snapshot:
    rules: list[RuleView]
    house_style_version: int
    category_rules_version: int
    rule_high_water: int
    composition_token: str = ""
    composition_token_expires_at: datetime | None = None


def _rule_not_found(lineage_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No rule lineage {lineage_id} is visible to this key.")


def _visible_lineage(principal: Principal, revisions: list[RuleRev], lineage_id: str) -> list[RuleRev]:
    if not revisions:
        raise _rule_not_found(lineage_id)
    head = revisions[-1]
    if head.layer is Layer.PROJECT and head.project_id != principal.project_id:
        raise _rule_not_found(lineage_id)
    return revisions


def _view(revisions: list[RuleRev], revision: RuleRev) -> RuleView:
    current = in_force(revisions)
    return RuleView(revision, status_of(revision, revisions[-1].rev, current.rev if current else None))


def _emit_rule_changed(uow: UnitOfWork, rule: RuleRev, status: str) -> None:
    uow.emit(
        REVIEW_STATE,
        rule.org_id,  # one aggregate per org: review_state sees the high-water rise in order
        "rule_changed",
        {
            "org_id": rule.org_id,
            "project_id": rule.project_id,
            "scope": rule.scope.value,
            "category_id": rule.category_id,
            "agent_id": rule.agent_id,
            "rule": {
                "id": rule.id,
                "lineage_id": rule.lineage_id,
                "rev": rule.rev,
                "rule_text": rule.rule_text,
                "status": status,
                "action": rule.action.value,
            },
            "rule_high_water": rule.high_water,
        },
    )


def _parse(enum: type[StrEnum], value: str, pointer: str, default: str) -> Any:
    try:
        return enum(value or default)
    except ValueError:
        raise invalid(pointer, f"must be one of {', '.join(e.value for e in enum)}") from None


async def _check_category(conn: AsyncConnection, principal: Principal, category_id: str) -> None:
    if await store.get_category(conn, principal.org_id, principal.project_id, category_id) is None:
        raise DomainError(
            Code.NOT_FOUND,
            f"No category {category_id} is visible to this key; list_categories, or create it first.",
        )


def _duplicate_of(candidate: RuleRev, revisions: list[RuleRev]) -> RuleRev | None:
    """An active or proposed rule of another lineage with the same normalized text in the same scope."""
    text = normalize(candidate.rule_text)
    lineages: dict[str, list[RuleRev]] = {}
    for revision in revisions:
        lineages.setdefault(revision.lineage_id, []).append(revision)
    for lineage_id, history in lineages.items():
        if lineage_id == candidate.lineage_id:
            continue
        history.sort(key=lambda r: r.rev)
        live = [r for r in (in_force(history), history[-1]) if r is not None and r.state is not State.RETIRED]
        for other in live:
            same_scope = (other.layer, other.project_id, other.agent_id, other.scope, other.category_id) == (
                candidate.layer,
                candidate.project_id,
                candidate.agent_id,
                candidate.scope,
                candidate.category_id,
            )
            if same_scope and normalize(other.rule_text) == text:
                return other
    return None


async def save_rule(db: Database, principal: Principal, body: RuleInput) -> RuleView:
    """Create a lineage or revise one (``lineage_id`` + the ``expected_rev`` read). Agents write the
    project layer only; with the project's write_approval on, their rules are born ``proposed``."""
    layer = _parse(Layer, body.rule_layer, "/rule_layer", Layer.PROJECT)
    if layer is Layer.ORG:
        _require(principal, (ActorKind.ADMIN,), "Writing org house style")
    text = check_rule_text(body.rule_text)
    kind = _parse(Kind, body.kind, "/kind", Kind.SOFT)
    if not PRIORITY_RANGE[0] <= body.priority <= PRIORITY_RANGE[1]:
        raise invalid("/priority", f"must be between {PRIORITY_RANGE[0]} and {PRIORITY_RANGE[1]}")
    if body.source_review_id and not has_prefix(body.source_review_id, "rr"):
        raise invalid("/source_review_id", "must be a review id (rr_...)")
    agent_id = body.agent_id
    if principal.actor_kind is ActorKind.AGENT and agent_id and agent_id != principal.actor_id:
        raise DomainError(Code.FORBIDDEN_ACTOR, "An agent may write per-agent rules for itself only.")
    if agent_id and not has_prefix(agent_id, "agt"):
        raise invalid("/agent_id", "must be an agent id (agt_...)")
    if body.lineage_id and body.expected_rev < 1:
        raise invalid("/expected_rev", "name the rev you read (read-before-write); get_rules shows it")
    if not body.lineage_id and body.expected_rev:
        raise invalid("/lineage_id", "expected_rev revises a lineage; name its lineage_id")

    async def act(uow: UnitOfWork) -> str:
        conn = uow.conn
        high_water = await store.bump_high_water(conn, principal.org_id)  # also the org's write lock
        now = utcnow()
        if body.lineage_id:
            history = _visible_lineage(
                principal, await store.lineage(conn, principal.org_id, body.lineage_id), body.lineage_id
            )
            head = history[-1]
            if head.layer is Layer.ORG:
                _require(principal, (ActorKind.ADMIN,), "Writing org house style")
            if head.rev != body.expected_rev:
                raise _stale(head)
            for name, given, kept in (
                ("scope", body.scope, head.scope.value),
                ("category_id", body.category_id, head.category_id),
                ("rule_layer", body.rule_layer, head.layer.value),
                ("agent_id", agent_id, head.agent_id),
            ):
                if given and given != kept:
                    raise invalid(f"/{name}", "a revision keeps its lineage's; retire it and save a new rule")
            rule_layer = head.layer
            scope, category_id, lineage_id, rev = head.scope, head.category_id, head.lineage_id, head.rev + 1
            agent, project_id, supersedes, action = head.agent_id, head.project_id, head.id, Action.REVISED
            if (normalize(text), kind, body.priority) == (
                normalize(head.rule_text),
                head.kind,
                head.priority,
            ):
                raise DomainError(
                    Code.CONFLICT,
                    f"Revision {head.rev} of {head.lineage_id} already says this; nothing to save.",
                    hints=(("rule_id", head.id), ("lineage_id", head.lineage_id)),
                )
        else:
            scope = _parse(Scope, body.scope, "/scope", Scope.CATEGORY if body.category_id else Scope.GENERAL)
            category_id = body.category_id
            if scope is Scope.CATEGORY and not category_id:
                raise invalid("/category_id", "a category rule names its category")
            if scope is Scope.GENERAL and category_id:
                raise invalid("/category_id", "a general rule has no category; use scope 'category'")
            if layer is Layer.ORG and (scope is Scope.CATEGORY or agent_id):
                raise invalid("/scope", "org house style is general: no category, no agent")
            if category_id:
                await _check_category(conn, principal, category_id)
            rule_layer = layer
            lineage_id, rev, supersedes, action = new_id("rln"), 1, "", Action.CREATED
            agent, project_id = agent_id, ("" if layer is Layer.ORG else principal.project_id)
        staged = (
            rule_layer is Layer.PROJECT
            and principal.actor_kind in (ActorKind.AGENT, ActorKind.REVIEW_AGENT)
            and await store.write_approval(conn, principal.project_id)
        )
        state = State.PROPOSED if staged else State.ACTIVE
        rule = RuleRev(
            id=new_id("rule"),
            lineage_id=lineage_id,
            rev=rev,
            layer=rule_layer,
            org_id=principal.org_id,
            project_id=project_id,
            agent_id=agent,
            scope=scope,
            category_id=category_id,
            kind=kind,
            priority=body.priority,
            rule_text=text,
            source_review_id=body.source_review_id,
            author_kind=_author_kind(principal),
            state=state,
            action=action,
            changed_by_kind=principal.actor_kind.value,
            changed_by_id=principal.actor_id,
            # A proposal stays out of the stack, so it does not move the high-water.
            high_water=0 if staged else high_water,
            supersedes_id=supersedes,
            created_at=now,
        )
        duplicate = _duplicate_of(
            rule, await store.revisions_on_ladder(conn, principal.org_id, principal.project_id)
        )
        if duplicate is not None:
            raise DomainError(
                Code.CONFLICT,
                f"Rule {duplicate.id} (lineage {duplicate.lineage_id}, rev {duplicate.rev}) already says "
                "this in the same scope; revise that one instead.",
                hints=(("rule_id", duplicate.id), ("lineage_id", duplicate.lineage_id)),
            )
        await _append(uow, rule)
        return rule.id

    fields = {"verb": "save_rule", **body.__dict__}
    fields.pop("idempotency_key")
    rule_id = await _idempotent(db, principal, body.idempotency_key, fields, act)
    return await _rule_by_id(db, principal, rule_id)


def _stale(head: RuleRev) -> DomainError:
    return DomainError(
        Code.STALE,
        f"Lineage {head.lineage_id} is at rev {head.rev}; re-read it (get_rules or its history), re-apply "
        "your change and save against that rev.",
        state=head.state.value,
        revision=head.rev,
    )


async def _append(uow: UnitOfWork, rule: RuleRev) -> None:
    """Append one revision; a lost race on (lineage, rev) is ``stale``. Publishes ``rule_changed``
    when the revision moved the effective stack."""
    try:
        await store.add_revision(uow.conn, rule, normalize(rule.rule_text))
    except IntegrityError:
        raise DomainError(
            Code.STALE,
            f"Another writer saved rev {rule.rev} of {rule.lineage_id} first; re-read it and retry.",
            revision=rule.rev,
        ) from None
    if rule.high_water:
        _emit_rule_changed(uow, rule, rule.state.value)


async def _rule_by_id(db: Database, principal: Principal, rule_id: str) -> RuleView:
    async with db.engine.connect() as conn:
        owner = await store.rule_lineage_of(conn, rule_id)
        history = await store.lineage(conn, principal.org_id, owner) if owner else []
    for revision in history:
        if revision.id == rule_id:
            return _view(history, revision)
    raise DomainError(Code.NOT_FOUND, f"No rule {rule_id} is visible to this key.")


async def _lineage_action(
    db: Database,
    principal: Principal,
    lineage_id: str,
    expected_rev: int,
    decide: Callable[[list[RuleRev]], tuple[RuleRev, Action, State] | DomainError],
) -> RuleView:
    """The console's lineage verbs: CAS on the head rev, then append the revision ``decide`` builds
    (copying the content of the revision it names into a new rev)."""
    _require(principal, HUMAN_AUTHORITY, "Changing a rule's status")
    if expected_rev < 1:
        raise invalid("/rev", "name the rev you read (read-before-write)")
    async with db.transaction() as uow:
        high_water = await store.bump_high_water(uow.conn, principal.org_id)
        history = _visible_lineage(
            principal, await store.lineage(uow.conn, principal.org_id, lineage_id), lineage_id
        )
        head = history[-1]
        if head.layer is Layer.ORG:
            _require(principal, (ActorKind.ADMIN,), "Changing org house style")
        if head.rev != expected_rev:
            raise _stale(head)
        decided = decide(history)
        if isinstance(decided, DomainError):
            raise decided
        source, action, state = decided
        before = in_force(history)
        rule = replace(
            source,
            id=new_id("rule"),
            rev=head.rev + 1,
            state=state,
            action=action,
            changed_by_kind=principal.actor_kind.value,
            changed_by_id=principal.actor_id,
            supersedes_id=head.id,
            created_at=utcnow(),
            high_water=0,
        )
        moved = before is None or (before.state, before.rule_text, before.kind, before.priority) != (
            rule.state,
            rule.rule_text,
            rule.kind,
            rule.priority,
        )
        if moved and (state is State.ACTIVE or (before is not None and before.state is State.ACTIVE)):
            rule = replace(rule, high_water=high_water)
        await _append(uow, rule)
    return _view([*history, rule], rule)


def _no_proposal(history: list[RuleRev]) -> DomainError | None:
    if history[-1].state is State.PROPOSED:
        return DomainError(
            Code.WRONG_STATE,
            f"Rev {history[-1].rev} of {history[-1].lineage_id} is a pending proposal; approve or reject it first.",
            state=State.PROPOSED.value,
            revision=history[-1].rev,
            allowed_actions=("approve_rule", "reject_rule"),
        )
    return None


async def retire_rule(db: Database, principal: Principal, lineage_id: str, expected_rev: int) -> RuleView:
    def decide(history: list[RuleRev]) -> tuple[RuleRev, Action, State] | DomainError:
        refusal = _no_proposal(history)
        if refusal:
            return refusal
        if history[-1].state is State.RETIRED:
            return DomainError(
                Code.WRONG_STATE,
                f"{lineage_id} is already retired.",
                state="retired",
                revision=history[-1].rev,
            )
        return history[-1], Action.RETIRED, State.RETIRED

    return await _lineage_action(db, principal, lineage_id, expected_rev, decide)


async def undo_rule(db: Database, principal: Principal, lineage_id: str, expected_rev: int) -> RuleView:
    """Restore the revision in force before the last change (undoing a creation retires the rule)."""

    def decide(history: list[RuleRev]) -> tuple[RuleRev, Action, State] | DomainError:
        refusal = _no_proposal(history)
        if refusal:
            return refusal
        current = in_force(history)
        assert current is not None  # the head is in force when no proposal is pending
        previous = in_force([r for r in history if r.rev < current.rev])
        if previous is None:
            return current, Action.UNDONE, State.RETIRED
        return previous, Action.UNDONE, previous.state

    return await _lineage_action(db, principal, lineage_id, expected_rev, decide)


async def approve_rule(db: Database, principal: Principal, lineage_id: str, expected_rev: int) -> RuleView:
    def decide(history: list[RuleRev]) -> tuple[RuleRev, Action, State] | DomainError:
        if history[-1].state is not State.PROPOSED:
            return _nothing_proposed(history[-1])
        return history[-1], Action.APPROVED, State.ACTIVE

    return await _lineage_action(db, principal, lineage_id, expected_rev, decide)


async def reject_rule(db: Database, principal: Principal, lineage_id: str, expected_rev: int) -> RuleView:
    """Refuse a proposal: the revision in force before it stays in force (a new, unmoving rev)."""

    def decide(history: list[RuleRev]) -> tuple[RuleRev, Action, State] | DomainError:
        if history[-1].state is not State.PROPOSED:
            return _nothing_proposed(history[-1])
        current = in_force(history)
        if current is None:
            return history[-1], Action.REJECTED, State.RETIRED
        return current, Action.REJECTED, current.state

    return await _lineage_action(db, principal, lineage_id, expected_rev, decide)


def _nothing_proposed(head: RuleRev) -> DomainError:
    return DomainError(
        Code.WRONG_STATE,
        f"Rev {head.rev} of {head.lineage_id} is {head.state}; only a proposed revision is approved or rejected.",
        state=head.state.value,
        revision=head.rev,
    )


async def rule_history(db: Database, principal: Principal, lineage_id: str) -> list[RuleView]:
    async with db.engine.connect() as conn:
        history = _visible_lineage(
            principal, await store.lineage(conn, principal.org_id, lineage_id), lineage_id
        )
    return [_view(history, r) for r in history]


def _ladder_agent(principal: Principal, agent_id: str) -> str:
    if principal.actor_kind is ActorKind.AGENT:
        if agent_id and agent_id != principal.actor_id:
            raise DomainError(Code.FORBIDDEN_ACTOR, "An agent reads its own ladder only; omit agent_id.")
        return principal.actor_id
    return agent_id


def _scope_high_water(
    revisions: list[RuleRev], *, org_id: str, project_id: str, agent_id: str, category_id: str
) -> int:
    """The newest high-water among revisions that can sit on this ladder (retired ones included)."""
    return max(
        (
            r.high_water
            for r in revisions
            if r.high_water
            and applies(r, org_id=org_id, project_id=project_id, agent_id=agent_id, category_id=category_id)
        ),
        default=0,
    )


async def _signing_key(conn: AsyncConnection) -> tuple[str, bytes]:
    key = await store.newest_token_key(conn)
    if key is None:
        key = await rotate_key_in(conn)
    return key


async def rotate_key_in(conn: AsyncConnection) -> tuple[str, bytes]:
    key_id, secret = new_id("ck"), secrets.token_bytes(32)
    await store.add_token_key(conn, key_id, secret)
    return key_id, secret


async def ensure_token_key(db: Database) -> None:
    """At first boot: the store gets its signing key."""
    async with db.transaction() as uow:
        await _signing_key(uow.conn)


async def rotate_composition_key(db: Database, principal: Principal) -> str:
    _require(principal, (ActorKind.ADMIN,), "Rotating the composition-token key")
    async with db.transaction() as uow:
        key_id, _ = await rotate_key_in(uow.conn)
    return key_id


async def get_rules(
    db: Database,
    settings: Settings,
    principal: Principal,
    *,
    scope: str = "",
    category_id: str = "",
    agent_id: str = "",
    status: str = "",
) -> Snapshot:
    """The effective stack, ladder applied. Unfiltered, it carries the versions, the high-water and a
    composition token bound to exactly this snapshot's scope."""
    scope_filter = _parse(Scope, scope, "/scope", Scope.GENERAL) if scope else None
    if status not in ("", State.PROPOSED.value):
        raise invalid("/status", "must be 'proposed' (pending staged approval) or omitted")
    agent = _ladder_agent(principal, agent_id)
    ladder = {
        "org_id": principal.org_id,
        "project_id": principal.project_id,
        "agent_id": agent,
        "category_id": category_id,
    }
    async with db.engine.connect() as conn:
        if category_id:
            await _check_category(conn, principal, category_id)
        revisions = await store.revisions_on_ladder(conn, principal.org_id, principal.project_id)
        browsing = bool(scope_filter or status)
        key = None if browsing else await store.newest_token_key(conn)
    if key is None and not browsing:
        async with db.transaction() as uow:
            key = await _signing_key(uow.conn)
    if status:
        heads: dict[str, RuleRev] = {}
        for r in revisions:
            if r.lineage_id not in heads or r.rev > heads[r.lineage_id].rev:
                heads[r.lineage_id] = r
        chosen = sorted(
            (h for h in heads.values() if h.state is State.PROPOSED and applies(h, **ladder)),
            key=stack_order_key,
        )
        views = [RuleView(r, State.PROPOSED.value) for r in chosen]
    else:
        views = [RuleView(r, r.state.value) for r in effective_stack(revisions, **ladder)]
    if scope_filter:
        views = [v for v in views if v.rule.scope is scope_filter]
    moved = [r for r in revisions if r.high_water]
    snapshot = Snapshot(
        rules=views,
        house_style_version=sum(1 for r in moved if r.layer is Layer.ORG),
        category_rules_version=sum(
            1
            for r in moved
            if r.layer is Layer.PROJECT
            and r.scope is Scope.CATEGORY
            and (not category_id or r.category_id == category_id)
        ),
        rule_high_water=_scope_high_water(revisions, **ladder),
    )
    if browsing or key is None:
        return snapshot
    expires = int(time.time()) + settings.token_ttl_s
    claims = tokens.Claims(
        key_id=key[0],
        org_id=principal.org_id,
        project_id=principal.project_id,
        agent_id=agent,
        category_id=category_id,
        high_water=snapshot.rule_high_water,
        expires_at=expires,
    )
    return replace(
        snapshot,
        composition_token=tokens.sign(claims, key[1]),
        composition_token_expires_at=datetime.fromtimestamp(expires, tz=utcnow().tzinfo),
    )


class TokenStatus(StrEnum):
    VALID = "valid"
    EXPIRED = "expired"
    STALE = "stale"
    INVALID = "invalid"


@dataclass(frozen=True)
class TokenCheck:
    status: TokenStatus
    token_rule_high_water: int = 0
    current_rule_high_water: int = 0


async def validate_composition_token(
    db: Database, principal: Principal, token: str, category_id: str, now: float | None = None
) -> TokenCheck:
    """VALID, EXPIRED, STALE (a rule in the token's scope moved past its high-water) or INVALID
    (malformed, forged, altered, or minted for another principal or category)."""
    claims = tokens.read_unverified(token)
    if claims is None:
        return TokenCheck(TokenStatus.INVALID)
    async with db.engine.connect() as conn:
        secret = await store.token_key(conn, claims.key_id)
        if secret is None or not tokens.verify(token, secret):
            return TokenCheck(TokenStatus.INVALID)
        agent = principal.actor_id if principal.actor_kind is ActorKind.AGENT else ""
        if (claims.org_id, claims.project_id, claims.agent_id) != (
            principal.org_id,
            principal.project_id,
            agent,
        ):
            return TokenCheck(TokenStatus.INVALID)
        if claims.category_id and category_id and claims.category_id != category_id:
            return TokenCheck(TokenStatus.INVALID)
        if (now if now is not None else time.time()) >= claims.expires_at:
            return TokenCheck(TokenStatus.EXPIRED, claims.high_water)
        revisions = await store.revisions_on_ladder(conn, principal.org_id, principal.project_id)
    current = _scope_high_water(
        revisions,
        org_id=principal.org_id,
        project_id=principal.project_id,
        agent_id=agent,
        # The draft's category narrows a token minted for every category: a change elsewhere
        # cannot have touched what this draft was composed against.
        category_id=claims.category_id or category_id,
    )
    status = TokenStatus.STALE if current > claims.high_water else TokenStatus.VALID
    return TokenCheck(status, claims.high_water, current)


async def get_rule_settings(db: Database, principal: Principal) -> bool:
    async with db.engine.connect() as conn:
        return await store.write_approval(conn, principal.project_id)


async def set_rule_settings(db: Database, principal: Principal, write_approval: bool) -> bool:
    _require(principal, (ActorKind.ADMIN,), "Setting staged approval")
    async with db.transaction() as uow:
        await store.set_write_approval(uow.conn, principal.org_id, principal.project_id, write_approval)
    return write_approval


# --- categories --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CategoryView:
    row: CategoryRow
    rule_high_water: int
    rules_version: int


def _category_not_found(category_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No category {category_id} is visible to this key.")


async def _category_views(
    conn: AsyncConnection, principal: Principal, rows: list[CategoryRow]
) -> list[CategoryView]:
    """Each category with its rule counters as this project sees them (category rules are
    project-layer, so an org-shared category's counters are per project)."""
    revisions = await store.revisions_on_ladder(conn, principal.org_id, principal.project_id)
    views = []
    for row in rows:
        moved = [
            r.high_water
            for r in revisions
            if r.high_water and r.scope is Scope.CATEGORY and r.category_id == row.id
        ]
        views.append(CategoryView(row, max(moved, default=0), len(moved)))
    return views


async def _load_category(conn: AsyncConnection, principal: Principal, category_id: str) -> CategoryRow:
    row = await store.get_category(conn, principal.org_id, principal.project_id, category_id)
    if row is None:
        raise _category_not_found(category_id)
    return row


async def create_category(
    db: Database,
    principal: Principal,
    *,
    name: str,
    description: str,
    scope: str,
    never_graduate: bool,
    idempotency_key: str = "",
) -> CategoryView:
    name = " ".join(name.split())
    if not name or len(name) > 200:
        raise invalid("/name", "must be 1 to 200 characters")
    if len(description) > 2000:
        raise invalid("/description", "must be at most 2000 characters")
    scope = scope or "org_shared"
    if scope not in CATEGORY_SCOPES:
        raise invalid("/scope", "must be org_shared or project")

    async def act(uow: UnitOfWork) -> str:
        await store.bump_high_water(uow.conn, principal.org_id)  # the org's write lock: names stay unique
        taken = await store.category_named(uow.conn, principal.org_id, principal.project_id, normalize(name))
        if taken is not None:
            raise DomainError(
                Code.CONFLICT,
                f"Category {taken.id} is already named {taken.name!r}; use it rather than a twin.",
                hints=(("category_id", taken.id),),
            )
        now = utcnow()
        row = CategoryRow(
            id=new_id("cat"),
            org_id=principal.org_id,
            project_id=principal.project_id,
            scope=scope,
            name=name,
            description=description.strip(),
            state=Grad.SUPERVISED,
            author_kind=_author_kind(principal),
            never_graduate=never_graduate,
            clean_approval_count=0,
            drift_count=0,
            version=1,
            created_at=now,
            state_changed_at=now,
        )
        await store.add_category(uow.conn, row, normalize(name))
        return row.id

    fields = {"verb": "create_category", "name": name, "description": description, "scope": scope}
    category_id = await _idempotent(db, principal, idempotency_key, {**fields, "ng": never_graduate}, act)
    return await get_category(db, principal, category_id)


async def get_category(db: Database, principal: Principal, category_id: str) -> CategoryView:
    async with db.engine.connect() as conn:
        row = await _load_category(conn, principal, category_id)
        return (await _category_views(conn, principal, [row]))[0]


async def update_category(
    db: Database,
    principal: Principal,
    category_id: str,
    *,
    name: str | None,
    description: str | None,
    never_graduate: bool | None,
) -> CategoryView:
    """Display metadata and the never_graduate lock (console)."""
    _require(principal, (ActorKind.ADMIN,), "Editing a category")
    changes: dict[str, Any] = {}
    if name is not None:
        name = " ".join(name.split())
        if not name or len(name) > 200:
            raise invalid("/name", "must be 1 to 200 characters")
        changes.update(name=name, normalized_name=normalize(name))
    if description is not None:
        if len(description) > 2000:
            raise invalid("/description", "must be at most 2000 characters")
        changes["description"] = description.strip()
    if never_graduate is not None:
        changes["never_graduate"] = never_graduate
    async with db.transaction() as uow:
        row = await _load_category(uow.conn, principal, category_id)
        if name is not None:
            taken = await store.category_named(
                uow.conn, principal.org_id, principal.project_id, normalize(name)
            )
            if taken is not None and taken.id != row.id:
                raise DomainError(
                    Code.CONFLICT,
                    f"Category {taken.id} is already named {taken.name!r}.",
                    hints=(("category_id", taken.id),),
                )
        if changes and not await store.compare_and_set_category(uow.conn, row, **changes):
            raise DomainError(Code.STALE, "The category changed at the same moment; re-read it and retry.")
    return await get_category(db, principal, category_id)


async def list_categories(
    db: Database, principal: Principal, *, cursor: str, limit: int
) -> tuple[list[CategoryView], str]:
    if limit < 0 or limit > LIST_LIMIT_MAX:
        raise invalid("/limit", f"must be between 1 and {LIST_LIMIT_MAX}")
    limit = limit or LIST_LIMIT_DEFAULT
    if cursor and not has_prefix(cursor, "cat"):
        raise invalid("/cursor", "is not one this service issued; pass next_cursor as given")
    async with db.engine.connect() as conn:
        rows = await store.list_categories(conn, principal.org_id, principal.project_id, cursor, limit + 1)
        views = await _category_views(conn, principal, rows[:limit])
    return views, (rows[limit - 1].id if len(rows) > limit else "")


def _age_hours(row: CategoryRow, now: datetime) -> float:
    return max(0.0, (now - row.state_changed_at).total_seconds() / 3600)


def _maturity(row: CategoryRow, now: datetime) -> graduation.Maturity:
    return graduation.Maturity(
        state=row.state,
        never_graduate=row.never_graduate,
        clean_approval_count=row.clean_approval_count,
        drift_count=row.drift_count,
        age_hours=_age_hours(row, now),
    )


async def _dial_for(conn: AsyncConnection, project_id: str, category_id: str) -> dict[str, Any]:
    account = risk.account_in_force(await store.account_dial(conn, project_id))
    return risk.effective(
        account, (await store.overrides(conn, project_id, category_id)).get(category_id, {})
    )


async def graduation_status(db: Database, principal: Principal, category_id: str) -> graduation.Status:
    async with db.engine.connect() as conn:
        row = await _load_category(conn, principal, category_id)
        dial = await _dial_for(conn, principal.project_id, category_id)
    return graduation.status(row.id, _maturity(row, utcnow()), dial)


@dataclass(frozen=True)
class Proposal:
    id: str
    category_id: str
    from_state: str
    to_state: str
    proposed_by: str
    note: str
    status: graduation.Status
    created_at: datetime


def _parse_rung(value: str, pointer: str) -> Grad:
    try:
        return Grad(value)
    except ValueError:
        raise invalid(pointer, f"must be one of {', '.join(r.value for r in graduation.LADDER)}") from None


async def propose_graduation(
    db: Database, principal: Principal, category_id: str, to_state: str, note: str
) -> Proposal:
    """Agents propose; only a human flips the rung (D16). The proposal is recorded for the console."""
    if len(note) > 2000:
        raise invalid("/note", "must be at most 2000 characters")
    async with db.transaction() as uow:
        row = await _load_category(uow.conn, principal, category_id)
        upcoming = graduation.next_rung(row.state)
        target = _parse_rung(to_state, "/to_state") if to_state else upcoming
        if row.never_graduate:
            raise DomainError(
                Code.GRADUATION_LOCKED,
                f"Category {category_id} is marked never_graduate; it stays supervised.",
            )
        if target is None or target != upcoming:
            raise invalid(
                "/to_state",
                f"the category is {row.state}; propose its next rung"
                + (f" ({upcoming})" if upcoming else " (it is already at the top)"),
            )
        proposal_id, now = new_id("gprop"), utcnow()
        await store.add_proposal(
            uow.conn,
            id=proposal_id,
            category_id=category_id,
            org_id=principal.org_id,
            project_id=principal.project_id,
            proposed_by=principal.actor_id,
            from_state=row.state.value,
            to_state=target.value,
            note=note,
            created_at=now,
        )
        dial = await _dial_for(uow.conn, principal.project_id, category_id)
    return Proposal(
        proposal_id,
        category_id,
        row.state.value,
        target.value,
        principal.actor_id,
        note,
        graduation.status(row.id, _maturity(row, now), dial),
        now,
    )


async def list_graduation_proposals(db: Database, principal: Principal) -> list[Proposal]:
    """The console's queue: proposals a human has not acted on yet, each with its category's
    graduation status as of now."""
    _require(principal, (ActorKind.ADMIN,), "Listing graduation proposals")
    now = utcnow()
    found: list[Proposal] = []
    async with db.engine.connect() as conn:
        statuses: dict[str, graduation.Status] = {}
        for row in await store.pending_proposals(conn, principal.project_id):
            category_id = row["category_id"]
            if category_id not in statuses:
                category = await _load_category(conn, principal, category_id)
                dial = await _dial_for(conn, principal.project_id, category_id)
                statuses[category_id] = graduation.status(category.id, _maturity(category, now), dial)
            found.append(
                Proposal(
                    row["id"],
                    category_id,
                    row["from_state"],
                    row["to_state"],
                    row["proposed_by"],
                    row["note"],
                    statuses[category_id],
                    row["created_at"],
                )
            )
    return found


def _emit_category_changed(uow: UnitOfWork, row: CategoryRow, state: Grad, reason: str) -> None:
    """A rung moved. An org-shared category's rung holds for every project of the org, so its event
    names no project (review_state then rechecks the whole org's pending drafts)."""
    uow.emit(
        REVIEW_STATE,
        row.id,
        "category_changed",
        {
            "org_id": row.org_id,
            "project_id": "" if row.scope == "org_shared" else row.project_id,
            "category_id": row.id,
            "state": state.value,
            "reason": reason,
        },
    )


async def graduate(db: Database, principal: Principal, category_id: str, to_state: str) -> CategoryView:
    """A human flips the rung: one rung up (never past ``never_graduate``; ``auto_silent`` only
    through the maturity gate) or any rung down. Counters restart in the new rung."""
    _require(principal, (ActorKind.ADMIN,), "Graduating a category")
    target = _parse_rung(to_state, "/to_state")
    async with db.transaction() as uow:
        row = await _load_category(uow.conn, principal, category_id)
        if target is row.state:
            pass
        else:
            up = graduation.LADDER.index(target) > graduation.LADDER.index(row.state)
            if up:
                if row.never_graduate:
                    raise DomainError(
                        Code.GRADUATION_LOCKED,
                        f"Category {category_id} is marked never_graduate; clear the lock first.",
                        state=row.state.value,
                    )
                upcoming = graduation.next_rung(row.state)
                if target is not upcoming:
                    raise invalid("/to_state", f"graduate one rung at a time; the next rung is {upcoming}")
                dial = await _dial_for(uow.conn, principal.project_id, category_id)
                status = graduation.status(row.id, _maturity(row, utcnow()), dial)
                if target is Grad.AUTO_SILENT and not status.maturity_gate_met:
                    raise DomainError(
                        Code.MATURITY_GATE_UNMET,
                        f"auto_silent needs {status.graduate_min_approvals} clean approvals (has "
                        f"{status.clean_approval_count}) and {status.graduate_min_age_hours} hours in "
                        f"{row.state} (has {status.age_hours}).",
                        state=row.state.value,
                    )
            if not await store.compare_and_set_category(
                uow.conn,
                row,
                state=target,
                clean_approval_count=0,
                drift_count=0,
                state_changed_at=utcnow(),
            ):
                raise DomainError(
                    Code.STALE, "The category changed at the same moment; re-read it and retry."
                )
            _emit_category_changed(uow, row, target, "graduated" if up else "demoted")
    return await get_category(db, principal, category_id)


async def ingest(db: Database, events: Sequence[Any]) -> tuple[int, int]:
    """Review outcomes from review_state, each counted once (deduplicated on event_id): clean
    approvals and drift move the maturity counters; drift at the dial's limit demotes a rung."""
    accepted = duplicates = 0
    for event in events:
        async with db.transaction() as uow:
            if not await first_delivery(uow.conn, event.event_id):
                duplicates += 1
                continue
            accepted += 1
            if event.type != "review_outcome":
                log.info("rules ignores event type %s (%s)", event.type, event.event_id)
                continue
            await _count_outcome(uow, orjson.loads(event.payload), event.event_id)
    return accepted, duplicates


async def _count_outcome(uow: UnitOfWork, body: dict[str, Any], event_id: str) -> None:
    try:
        outcome = Outcome(body.get("outcome", ""))
        org_id, project_id, category_id = body["org_id"], body["project_id"], body.get("category_id", "")
    except (ValueError, KeyError):
        log.error("rules refused malformed review_outcome %s: %r", event_id, body)
        return
    if not category_id:
        return
    row = await store.get_category(uow.conn, org_id, project_id, category_id, lock=True)
    if row is None:
        log.warning("review_outcome %s names unknown category %s", event_id, category_id)
        return
    dial = await _dial_for(uow.conn, project_id, category_id)
    clean, drift, demote_to = graduation.after_outcome(
        _maturity(row, utcnow()), outcome, dial["drift_demote_after"]
    )
    changes: dict[str, Any] = {"clean_approval_count": clean, "drift_count": drift}
    if demote_to is not None:
        changes = {
            "state": demote_to,
            "clean_approval_count": 0,
            "drift_count": 0,
            "state_changed_at": utcnow(),
        }
    if not await store.compare_and_set_category(uow.conn, row, **changes):
        raise DomainError(Code.STALE, "category changed concurrently; the relay redelivers")
    if demote_to is not None:
        _emit_category_changed(uow, row, demote_to, "demoted")


async def resolve_owner(db: Database, *, category_id: str = "", lineage_id: str = "") -> tuple[str, str]:
    async with db.engine.connect() as conn:
        owner = (
            await store.category_owner(conn, category_id)
            if category_id
            else await store.lineage_owner(conn, lineage_id)
        )
    if owner is None:
        raise DomainError(
            Code.NOT_FOUND, f"No {'category' if category_id else 'rule lineage'} {category_id or lineage_id}."
        )
    return owner


# --- risk dial ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CategoryDial:
    category_id: str
    overrides: dict[str, Any]  # as the console wrote them; None = explicitly inherit
    effective: dict[str, Any]


@dataclass(frozen=True)
class Dial:
    account: dict[str, Any]
    categories: list[CategoryDial] = field(default_factory=list)


async def get_risk_dial(db: Database, principal: Principal, category_id: str = "") -> Dial:
    """The account defaults in force and each overridden category's values (with ``category_id``,
    that category alone, overridden or not)."""
    async with db.engine.connect() as conn:
        return await _dial(conn, principal, category_id)


async def _dial(conn: AsyncConnection, principal: Principal, category_id: str) -> Dial:
    account = risk.account_in_force(await store.account_dial(conn, principal.project_id))
    if category_id:
        await _load_category(conn, principal, category_id)
    written = await store.overrides(conn, principal.project_id, category_id)
    if category_id and category_id not in written:
        written[category_id] = {}
    return Dial(
        account,
        [CategoryDial(cid, values, risk.effective(account, values)) for cid, values in written.items()],
    )


async def set_risk_dial(
    db: Database,
    principal: Principal,
    *,
    account: Mapping[str, Any] | None,
    categories: Sequence[tuple[str, Mapping[str, Any]]],
) -> Dial:
    """Console: ``account`` fields merge (null returns one to the built-in default); each listed
    category's overrides are replaced (a null or absent field inherits)."""
    _require(principal, (ActorKind.ADMIN,), "Setting the risk dial")
    checked_account = risk.validate(account, "/account") if account is not None else None
    checked = [(cid, risk.validate(values, f"/categories/{i}")) for i, (cid, values) in enumerate(categories)]
    async with db.transaction() as uow:
        if checked_account is not None:
            stored = await store.account_dial(uow.conn, principal.project_id)
            for name, value in checked_account.items():
                if value is None:
                    stored.pop(name, None)
                else:
                    stored[name] = value
            await store.save_account_dial(uow.conn, principal.org_id, principal.project_id, stored)
        for cid, values in checked:
            await _load_category(uow.conn, principal, cid)
            await store.save_overrides(uow.conn, principal.project_id, cid, values)
        return await _dial(uow.conn, principal, "")
