"""The gateway's own store: projects and API keys (hashed at rest)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from reviewloop.ids import new_id
from reviewloop.storage.schema import UtcDateTime, insert_new, new_metadata, utcnow
from reviewloop.tenancy import ActorKind
from sqlalchemy import (
    Column,
    DateTime,
    Float,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

metadata = new_metadata()

projects = Table(
    "projects",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False, index=True),
    Column("name", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(40), primary_key=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("actor_kind", String(16), nullable=False),
    Column("agent_id", String(40)),
    Column("name", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True)),
    # Where the key's person is told of a draft escalated to them (or their role); NULL: not told by mail.
    Column("email", String(320)),
)

# Mutations the gateway itself makes idempotent: (scope = caller + operation, key) -> the first answer.
# While the mutation runs, ``status`` is PENDING and ``created_at`` is when its claim was last renewed.
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(120), primary_key=True),
    Column("idempotency_key", String(255), primary_key=True),
    Column("request_sha256", String(64), nullable=False),
    Column("status", Integer, nullable=False),
    Column("response", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


def hash_key(secret: str) -> str:
    # Keys are 256 random bits, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Project:
    project_id: str
    org_id: str
    name: str


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    org_id: str
    project_id: str
    actor_kind: ActorKind
    agent_id: str | None
    name: str
    created_at: datetime
    revoked_at: datetime | None
    email: str | None = None


async def create_project(conn: AsyncConnection, name: str, org_id: str | None) -> Project:
    project = Project(project_id=new_id("prj"), org_id=org_id or new_id("org"), name=name)
    await conn.execute(insert(projects).values(**project.__dict__, created_at=utcnow()))
    return project


async def get_project(conn: AsyncConnection, project_id: str) -> Project | None:
    row = (await conn.execute(select(projects).where(projects.c.project_id == project_id))).first()
    return Project(row.project_id, row.org_id, row.name) if row else None


async def org_exists(conn: AsyncConnection, org_id: str) -> bool:
    return await a_project_of(conn, org_id) is not None


async def a_project_of(conn: AsyncConnection, org_id: str) -> str | None:
    """Some project of ``org_id`` (None when the org has none, so does not exist)."""
    return (
        await conn.execute(select(projects.c.project_id).where(projects.c.org_id == org_id).limit(1))
    ).scalar()


async def issue_key(
    conn: AsyncConnection, project: Project, actor_kind: ActorKind, name: str, email: str | None = None
) -> tuple[ApiKey, str]:
    """A new key and its secret; the secret is returned once and only its hash is stored."""
    secret = "rlk_" + secrets.token_urlsafe(32)
    agent_id = new_id("agt") if actor_kind in (ActorKind.AGENT, ActorKind.REVIEW_AGENT) else None
    key = ApiKey(
        key_id=new_id("key"),
        org_id=project.org_id,
        project_id=project.project_id,
        actor_kind=actor_kind,
        agent_id=agent_id,
        name=name,
        created_at=utcnow(),
        revoked_at=None,
        email=email or None,
    )
    await conn.execute(
        insert(api_keys).values(**{**key.__dict__, "actor_kind": actor_kind.value}, key_hash=hash_key(secret))
    )
    return key, secret


def _key(row: object) -> ApiKey:
    m = row._mapping  # type: ignore[attr-defined]
    return ApiKey(
        key_id=m["key_id"],
        org_id=m["org_id"],
        project_id=m["project_id"],
        actor_kind=ActorKind(m["actor_kind"]),
        agent_id=m["agent_id"],
        name=m["name"],
        created_at=m["created_at"],
        revoked_at=m["revoked_at"],
        email=m["email"],
    )


# Built once: a request that misses the key cache builds no statement and walks no cache key (the walk
# was most of the lookup's CPU in the gateway's profile).
_KEY_BY_HASH = select(api_keys).where(api_keys.c.key_hash == bindparam("key_hash"))


async def key_by_hash(conn: AsyncConnection, key_hash: str) -> ApiKey | None:
    row = (await conn.execute(_KEY_BY_HASH, {"key_hash": key_hash})).first()
    return _key(row) if row else None


async def get_key(conn: AsyncConnection, key_id: str) -> ApiKey | None:
    row = (await conn.execute(select(api_keys).where(api_keys.c.key_id == key_id))).first()
    return _key(row) if row else None


async def revoke_key(conn: AsyncConnection, key_id: str) -> None:
    await conn.execute(
        update(api_keys)
        .where(api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )


PENDING = 0  # the status of a mutation still running under its key


@dataclass(frozen=True)
class Remembered:
    request_sha256: str
    status: int
    response: bytes


def _scope_key(scope: str, key: str) -> Any:
    return (idempotency_keys.c.scope == scope) & (idempotency_keys.c.idempotency_key == key)


async def remembered(conn: AsyncConnection, scope: str, key: str) -> Remembered | None:
    """The answer given under ``(scope, key)``, if any (``status`` PENDING while it still runs)."""
    row = (await conn.execute(select(idempotency_keys).where(_scope_key(scope, key)))).first()
    return Remembered(row.request_sha256, row.status, row.response.encode()) if row else None


async def claim(conn: AsyncConnection, scope: str, key: str, request_sha256: str, lease: timedelta) -> bool:
    """Reserve ``(scope, key)`` for a mutation about to run; False when another request holds it.

    A claim not renewed for ``lease`` was left by a gateway that died mid-request: the same request
    takes it over (one retry wins the compare-and-set), so a key is never ``still running`` forever.
    """
    now = utcnow()
    result = await insert_new(
        conn,
        idempotency_keys,
        {
            "scope": scope,
            "idempotency_key": key,
            "request_sha256": request_sha256,
            "status": PENDING,
            "response": "",
            "created_at": now,
        },
    )
    if result.rowcount:
        return True
    taken_over = await conn.execute(
        update(idempotency_keys)
        .where(
            _scope_key(scope, key),
            idempotency_keys.c.status == PENDING,
            idempotency_keys.c.request_sha256 == request_sha256,
            idempotency_keys.c.created_at < now - lease,
        )
        .values(created_at=now)
    )
    return bool(taken_over.rowcount)


async def renew(conn: AsyncConnection, scope: str, key: str) -> None:
    """Keep a running mutation's claim from expiring."""
    await conn.execute(
        update(idempotency_keys)
        .where(_scope_key(scope, key), idempotency_keys.c.status == PENDING)
        .values(created_at=utcnow())
    )


async def remember(conn: AsyncConnection, scope: str, key: str, status: int, response: bytes) -> None:
    await conn.execute(
        update(idempotency_keys)
        .where(_scope_key(scope, key))
        .values(status=status, response=response.decode())
    )


async def forget(conn: AsyncConnection, scope: str, key: str) -> None:
    """Release a key whose mutation failed, so a retry runs it again."""
    await conn.execute(delete(idempotency_keys).where(_scope_key(scope, key)))


# Reviewer console sessions (gateway.console.sessions): a signed-in key's server-side session. Only hashes
# of the two cookie secrets are kept; the key itself never reaches the browser or this table.
console_sessions = Table(
    "console_sessions",
    metadata,
    Column("session_id", String(40), primary_key=True),
    Column("write_hash", String(64), nullable=False, unique=True),
    Column("read_hash", String(64), nullable=False, unique=True),
    Column("key_id", String(40), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
)


@dataclass(frozen=True)
class ConsoleSession:
    session_id: str
    key_id: str
    expires_at: datetime


async def create_session(
    conn: AsyncConnection, key_id: str, write_hash: str, read_hash: str, expires_at: datetime
) -> ConsoleSession:
    session = ConsoleSession(secrets.token_hex(16), key_id, expires_at)
    # Expired sessions nobody presents again would otherwise stay forever: each sign-in sweeps them.
    await conn.execute(delete(console_sessions).where(console_sessions.c.expires_at <= utcnow()))
    await conn.execute(
        insert(console_sessions).values(
            session_id=session.session_id,
            write_hash=write_hash,
            read_hash=read_hash,
            key_id=key_id,
            created_at=utcnow(),
            expires_at=expires_at,
        )
    )
    return session


async def session_by_hash(conn: AsyncConnection, secret_hash: str, *, write: bool) -> ConsoleSession | None:
    """The session whose write (or, for a read, either) cookie secret hashes to ``secret_hash``."""
    column = console_sessions.c.write_hash
    where = column == secret_hash
    if not write:
        where = where | (console_sessions.c.read_hash == secret_hash)
    row = (await conn.execute(select(console_sessions).where(where))).first()
    return ConsoleSession(row.session_id, row.key_id, row.expires_at) if row else None


async def end_session(conn: AsyncConnection, session_id: str) -> None:
    await conn.execute(delete(console_sessions).where(console_sessions.c.session_id == session_id))


# Who has a review open in the console: one row per (review, session), refreshed while the page is open
# and read only while fresh; every touch sweeps the rows nobody refreshed.
console_presence = Table(
    "console_presence",
    metadata,
    Column("review_id", String(40), primary_key=True),
    Column("session_id", String(40), primary_key=True),
    Column("project_id", String(40), nullable=False, index=True),
    Column("actor", String(200), nullable=False),
    Column("seen_at", UtcDateTime, nullable=False),
)


@dataclass(frozen=True)
class Presence:
    review_id: str
    session_id: str
    actor: str


async def touch_presence(
    conn: AsyncConnection, project_id: str, review_id: str, session_id: str, actor: str, ttl: timedelta
) -> None:
    now = utcnow()
    await conn.execute(delete(console_presence).where(console_presence.c.seen_at <= now - ttl))
    key = (console_presence.c.review_id == review_id) & (console_presence.c.session_id == session_id)
    updated = await conn.execute(update(console_presence).where(key).values(actor=actor, seen_at=now))
    if updated.rowcount == 0:
        await insert_new(
            conn,
            console_presence,
            {
                "review_id": review_id,
                "session_id": session_id,
                "project_id": project_id,
                "actor": actor,
                "seen_at": now,
            },
        )


async def present(
    conn: AsyncConnection, project_id: str, ttl: timedelta, review_id: str = ""
) -> list[Presence]:
    """Who was seen within ``ttl`` on the project's reviews (or on ``review_id``), oldest first."""
    query = select(console_presence).where(
        console_presence.c.project_id == project_id, console_presence.c.seen_at > utcnow() - ttl
    )
    if review_id:
        query = query.where(console_presence.c.review_id == review_id)
    rows = await conn.execute(query.order_by(console_presence.c.seen_at))
    return [Presence(row.review_id, row.session_id, row.actor) for row in rows]


async def project_keys(conn: AsyncConnection, project_id: str) -> list[ApiKey]:
    """The project's keys, newest first (the console's key list; secrets are never readable)."""
    rows = await conn.execute(
        select(api_keys).where(api_keys.c.project_id == project_id).order_by(api_keys.c.created_at.desc())
    )
    return [_key(row) for row in rows]


# The agent plane's rate-limit windows (gateway.ratelimits): one row per (limit, key or project, window),
# counted by one upsert, so every replica of the gateway shares them through this store.
rate_limit_counters = Table(
    "rate_limit_counters",
    metadata,
    Column("limit_key", String(255), primary_key=True),
    Column("hits", Integer, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),  # unix seconds
)
