"""The effective stack an agent composes against, and the composition token that pins it.

``get_rules`` applies the ladder (``domain.ladder``) and, unfiltered, signs a token bound to the
snapshot's scope and high-water (``domain.token``); ``validate_composition_token`` tells a draft
composed against it whether a rule in that scope has moved since. Signing keys rotate; older keys
keep verifying until their tokens expire.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.storage import utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.app.authority import require
from rules.app.categories import check_category
from rules.app.env import Env
from rules.app.rules import RuleView
from rules.domain import token as tokens
from rules.domain.ladder import (
    Layer,
    RuleRev,
    Scope,
    State,
    applies,
    effective_stack,
    parse_choice,
    stack_order_key,
)


@dataclass(frozen=True)
class Snapshot:
    rules: list[RuleView]
    house_style_version: int
    category_rules_version: int
    rule_high_water: int
    composition_token: str = ""
    composition_token_expires_at: datetime | None = None


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


def _ladder_agent(principal: Principal, agent_id: str) -> str:
    if principal.actor_kind is ActorKind.AGENT:
        if agent_id and agent_id != principal.actor_id:
            raise DomainError(Code.FORBIDDEN_SCOPE, "An agent reads its own ladder only; omit agent_id.")
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


def _proposed(revisions: list[RuleRev], ladder: dict[str, str]) -> list[RuleView]:
    """The pending proposals on this ladder (each lineage's head, when it is one), in stack order."""
    heads: dict[str, RuleRev] = {}
    for r in revisions:
        if r.lineage_id not in heads or r.rev > heads[r.lineage_id].rev:
            heads[r.lineage_id] = r
    chosen = sorted(
        (h for h in heads.values() if h.state is State.PROPOSED and applies(h, **ladder)),
        key=stack_order_key,
    )
    return [RuleView(r, State.PROPOSED.value) for r in chosen]


async def get_rules(
    env: Env,
    principal: Principal,
    *,
    scope: str = "",
    category_id: str = "",
    agent_id: str = "",
    status: str = "",
) -> Snapshot:
    """The effective stack, ladder applied. Unfiltered, it carries the versions, the high-water and a
    composition token bound to exactly this snapshot's scope."""
    scope_filter = parse_choice(Scope, scope, "/scope", Scope.GENERAL) if scope else None
    if status not in ("", State.PROPOSED.value):
        raise invalid("/status", "must be 'proposed' (pending staged approval) or omitted")
    agent = _ladder_agent(principal, agent_id)
    ladder = {
        "org_id": principal.org_id,
        "project_id": principal.project_id,
        "agent_id": agent,
        "category_id": category_id,
    }
    async with env.db.engine.connect() as conn:
        if category_id:
            await check_category(conn, principal, category_id)
        revisions = await store.revisions_on_ladder(conn, principal.org_id, principal.project_id)
        browsing = bool(scope_filter or status)
        key = None if browsing else await _newest_key(conn, env)
    if key is None and not browsing:
        async with env.db.transaction() as uow:
            key = await _signing_key(uow.conn, env)
    if status:
        views = _proposed(revisions, ladder)
    else:
        views = [RuleView(r, r.state.value) for r in effective_stack(revisions, **ladder)]
    if scope_filter:
        views = [v for v in views if v.rule.scope is scope_filter]
    snapshot = _versions(views, revisions, ladder)
    if browsing or key is None:
        return snapshot
    return _signed(snapshot, key, env.settings.token_ttl_s, ladder)


def _versions(views: list[RuleView], revisions: list[RuleRev], ladder: dict[str, str]) -> Snapshot:
    """The stack's views with its house-style and category rules-versions and its high-water."""
    category_id = ladder["category_id"]
    moved = [r for r in revisions if r.high_water]
    return Snapshot(
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


def _signed(snapshot: Snapshot, key: tuple[str, bytes], ttl_s: int, ladder: dict[str, str]) -> Snapshot:
    """The snapshot with a composition token bound to its ladder and high-water."""
    expires = int(time.time()) + ttl_s
    claims = tokens.Claims(key_id=key[0], high_water=snapshot.rule_high_water, expires_at=expires, **ladder)
    return replace(
        snapshot,
        composition_token=tokens.sign(claims, key[1]),
        composition_token_expires_at=datetime.fromtimestamp(expires, tz=utcnow().tzinfo),
    )


async def validate_composition_token(
    env: Env, principal: Principal, token: str, category_id: str, now: float | None = None
) -> TokenCheck:
    """VALID, EXPIRED, STALE (a rule in the token's scope moved past its high-water) or INVALID
    (malformed, forged, altered, or minted for another principal or category)."""
    claims = tokens.read_unverified(token)
    if claims is None:
        return TokenCheck(TokenStatus.INVALID)
    async with env.db.engine.connect() as conn:
        secret = _verifying_secret(await store.token_key(conn, claims.key_id), env, utcnow())
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


# --- signing keys --------------------------------------------------------------------------------


# A signing key is derived from the deployment's composition-token key over (key id, salt); the row
# keeps only the salt and the deployment key's public name, so a copy of the store mints nothing
# (issue 35, "as the webhook key is"). Keys kept in plain before that verify the tokens already out for
# one token lifetime, sign nothing, and are then wiped (store.retire_legacy_token_keys).


async def _newest_key(conn: AsyncConnection, env: Env) -> tuple[str, bytes] | None:
    row = await store.newest_token_key(conn, tokens.key_ref(env.settings.token_key))
    if row is None or row.salt is None:
        return None
    return row.key_id, tokens.derive_key(env.settings.token_key, row.key_id, row.salt)


def _verifying_secret(row: store.TokenKey | None, env: Env, now: datetime) -> bytes | None:
    """The key that checks a token naming ``row``: a derived one under this deployment key, or a legacy
    one inside its grace; None otherwise (the token is invalid: re-read the rules for a new one)."""
    if row is None:
        return None
    if row.salt is not None:
        if row.key_ref != tokens.key_ref(env.settings.token_key):
            return None  # derived under another deployment key
        return tokens.derive_key(env.settings.token_key, row.key_id, row.salt)
    if row.secret is not None and row.retire_at is not None and now < row.retire_at:
        return row.secret
    return None


async def _signing_key(conn: AsyncConnection, env: Env) -> tuple[str, bytes]:
    key = await _newest_key(conn, env)
    if key is None:
        key = await _new_key(conn, env)
    return key


async def _new_key(conn: AsyncConnection, env: Env) -> tuple[str, bytes]:
    key_id, salt = new_id("ck"), secrets.token_urlsafe(24)
    await store.add_token_key(conn, key_id, salt, tokens.key_ref(env.settings.token_key))
    return key_id, tokens.derive_key(env.settings.token_key, key_id, salt)


async def ensure_token_key(env: Env) -> None:
    """At boot: legacy keys kept in plain start (or finish) their retirement, and the store gets a
    signing key derived under this deployment key."""
    async with env.db.transaction() as uow:
        await store.retire_legacy_token_keys(uow.conn, utcnow(), env.settings.token_ttl_s)
        await _signing_key(uow.conn, env)


async def rotate_composition_key(env: Env, principal: Principal) -> str:
    require(principal, (ActorKind.ADMIN,), "Rotating the composition-token key")
    async with env.db.transaction() as uow:
        key_id, _ = await _new_key(uow.conn, env)
    return key_id
