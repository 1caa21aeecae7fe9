"""Bearer-key authentication and the actor checks of DESIGN.md's planes."""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import Request
from reviewloop.errors import Code, DomainError
from reviewloop.tenancy import ActorKind, Principal

from gateway import store


@dataclass(frozen=True)
class Caller:
    """Who called: a project key's principal, or the bootstrap admin token (no tenant of its own)."""

    principal: Principal | None
    key_id: str | None

    @property
    def is_admin(self) -> bool:
        return self.principal is None or self.principal.actor_kind is ActorKind.ADMIN


class KeyCache:
    """Keys this gateway authenticated in the last ``ttl_s`` seconds, by hash, so a request costs no
    store read. Revoking through this gateway forgets the key at once; another gateway replica stops
    honouring it within ``ttl_s`` (0 turns the cache off). Only live keys are cached."""

    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, store.ApiKey]] = OrderedDict()

    def get(self, key_hash: str) -> store.ApiKey | None:
        entry = self._entries.get(key_hash)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            del self._entries[key_hash]
            return None
        return entry[1]

    def put(self, key_hash: str, key: store.ApiKey) -> None:
        if self.ttl_s <= 0:
            return
        self._entries[key_hash] = (time.monotonic() + self.ttl_s, key)
        self._entries.move_to_end(key_hash)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, key_id: str) -> None:
        for key_hash in [h for h, (_, key) in self._entries.items() if key.key_id == key_id]:
            del self._entries[key_hash]


async def authenticate(request: Request) -> Caller:
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise DomainError(Code.UNAUTHORIZED, "Send the API key as 'Authorization: Bearer <key>'.")
    secret = secret.strip()
    state = request.app.state
    if hmac.compare_digest(secret.encode(), state.settings.admin_token.encode()):
        return Caller(principal=None, key_id=None)
    key_hash = store.hash_key(secret)
    key = state.key_cache.get(key_hash)
    if key is None:
        async with state.db.single_statement.connect() as conn:
            key = await store.key_by_hash(conn, key_hash)
        if key is None or key.revoked_at is not None:
            raise DomainError(
                Code.UNAUTHORIZED, "The API key is unknown or revoked; ask an admin for a new key."
            )
        state.key_cache.put(key_hash, key)
    principal = Principal(
        org_id=key.org_id,
        project_id=key.project_id,
        actor_kind=key.actor_kind,
        actor_id=key.agent_id or key.key_id,
    )
    return Caller(principal=principal, key_id=key.key_id)


def require(*kinds: ActorKind) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the caller's principal, if its actor kind may use this verb."""
    allowed = ", ".join(kinds)

    async def dependency(request: Request) -> Principal:
        caller = await authenticate(request)
        if caller.principal is None or caller.principal.actor_kind not in kinds:
            who = (
                "the bootstrap admin token"
                if caller.principal is None
                else f"a {caller.principal.actor_kind} key"
            )
            raise DomainError(
                Code.FORBIDDEN_SCOPE, f"This verb takes a key of kind {allowed}; you used {who}."
            )
        return caller.principal

    # Read by the MCP server, which lists a key only the tools of its plane (gateway.mcp.planes).
    dependency.actor_kinds = frozenset(kinds)  # type: ignore[attr-defined]
    return dependency


async def require_admin(request: Request) -> Caller:
    """Console authority: the bootstrap token, or an admin key (within its own org)."""
    caller = await authenticate(request)
    if not caller.is_admin:
        raise DomainError(
            Code.FORBIDDEN_SCOPE, "Console verbs take an admin key or the bootstrap admin token."
        )
    return caller


AGENT = require(ActorKind.AGENT)
ANY_PROJECT_KEY = require(ActorKind.AGENT, ActorKind.HUMAN, ActorKind.REVIEW_AGENT, ActorKind.ADMIN)
COMPOSER_OR_HUMAN = require(ActorKind.AGENT, ActorKind.HUMAN, ActorKind.ADMIN)


def check_org(caller: Caller, org_id: str) -> None:
    """An admin key administers its own org only; another org's ids read as absent."""
    if caller.principal is not None and caller.principal.org_id != org_id:
        raise DomainError(Code.NOT_FOUND, f"No org {org_id} is visible to this key.")


async def console_principal(caller: Caller, request: Request, project_id: str) -> Principal:
    """The admin principal a console verb acts as on ``project_id``: the bootstrap token acts for any
    project, an admin key only within its own org (another org's project reads as absent)."""
    async with request.app.state.db.single_statement.connect() as conn:
        project = await store.get_project(conn, project_id)
    if project is None or (caller.principal is not None and caller.principal.org_id != project.org_id):
        raise DomainError(Code.NOT_FOUND, f"No project {project_id} is visible to this key.")
    return Principal(project.org_id, project.project_id, ActorKind.ADMIN, admin_actor_id(caller))


async def org_principal(caller: Caller, request: Request, org_id: str) -> Principal:
    """An admin principal for org-level work: the admin key's own project, or (bootstrap token) any
    project of the org, since every service scopes a principal to a project."""
    check_org(caller, org_id)
    if caller.principal is not None:
        return Principal(org_id, caller.principal.project_id, ActorKind.ADMIN, admin_actor_id(caller))
    async with request.app.state.db.engine.connect() as conn:
        project_id = await store.a_project_of(conn, org_id)
    if project_id is None:
        raise DomainError(Code.NOT_FOUND, f"No org {org_id}.")
    return Principal(org_id, project_id, ActorKind.ADMIN, admin_actor_id(caller))


def admin_actor_id(caller: Caller) -> str:
    """Who acted, for audit: the admin key's id, or ``bootstrap`` for the bootstrap token."""
    return caller.key_id or "bootstrap"
