"""Console sign-in: a human or admin key is exchanged for a server-side session; the key never reaches the
browser and only hashes of the cookie secrets are stored.

Two cookies name one session. ``rl_console`` is ``SameSite=Strict`` and is the only one a write accepts;
``rl_console_read`` is ``SameSite=Lax`` so a deep link from mail or chat (a cross-site navigation) still
opens the draft. Every form carries a CSRF token: an HMAC of the session id under a key derived from the
gateway's admin token, so it is signed, bound to its session, and useless with another one."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from fastapi import Request
from reviewloop.errors import Code, DomainError
from reviewloop.storage.schema import utcnow
from reviewloop.tenancy import ActorKind, Principal
from starlette.responses import Response

from gateway import store

WRITE_COOKIE = "rl_console"
READ_COOKIE = "rl_console_read"
SESSION_TTL = timedelta(hours=8)
SIGN_IN_KINDS = (ActorKind.HUMAN, ActorKind.ADMIN)


@dataclass(frozen=True)
class Session:
    session_id: str
    key_id: str
    principal: Principal
    csrf: str

    @property
    def is_admin(self) -> bool:
        return self.principal.actor_kind is ActorKind.ADMIN


def _csrf(request: Request, session_id: str) -> str:
    key = hashlib.sha256(b"reviewloop-console-csrf:" + request.app.state.settings.admin_token.encode())
    return hmac.new(key.digest(), session_id.encode(), hashlib.sha256).hexdigest()


async def sign_in(request: Request, response: Response, secret: str) -> None:
    """Start a session for the key ``secret`` and set its cookies on ``response``; agent keys, the
    bootstrap token and unknown or revoked keys are refused."""
    secret = secret.strip()
    state = request.app.state
    async with state.db.single_statement.connect() as conn:
        key = await store.key_by_hash(conn, store.hash_key(secret)) if secret else None
    if key is None or key.revoked_at is not None:
        raise DomainError(Code.UNAUTHORIZED, "That key is unknown or revoked; ask an admin for a human key.")
    if key.actor_kind not in SIGN_IN_KINDS:
        raise DomainError(
            Code.FORBIDDEN_SCOPE,
            f"A {key.actor_kind} key cannot sign in to the console; use a human or admin key.",
        )
    write_secret, read_secret = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    expires_at = utcnow() + SESSION_TTL
    async with state.db.transaction() as uow:
        await store.create_session(
            uow.conn, key.key_id, store.hash_key(write_secret), store.hash_key(read_secret), expires_at
        )
    secure = request.url.scheme == "https"
    max_age = int(SESSION_TTL.total_seconds())
    response.set_cookie(
        WRITE_COOKIE,
        write_secret,
        max_age=max_age,
        path="/console",
        httponly=True,
        secure=secure,
        samesite="strict",
    )
    response.set_cookie(
        READ_COOKIE,
        read_secret,
        max_age=max_age,
        path="/console",
        httponly=True,
        secure=secure,
        samesite="lax",
    )


async def current(request: Request, *, write: bool) -> Session | None:
    """The request's live session: a write needs the Strict cookie, a read takes either."""
    secrets_ = [request.cookies.get(WRITE_COOKIE)]
    if not write:
        secrets_.append(request.cookies.get(READ_COOKIE))
    db = request.app.state.db
    for secret in filter(None, secrets_):
        async with db.engine.connect() as conn:
            session = await store.session_by_hash(conn, store.hash_key(secret), write=write)
            key = await store.get_key(conn, session.key_id) if session else None
        if session is None or key is None:
            continue
        if key.revoked_at is not None or session.expires_at <= utcnow():
            async with db.transaction() as uow:
                await store.end_session(uow.conn, session.session_id)
            continue
        principal = Principal(key.org_id, key.project_id, key.actor_kind, key.agent_id or key.key_id)
        return Session(session.session_id, key.key_id, principal, _csrf(request, session.session_id))
    return None


def check_csrf(session: Session, token: str) -> None:
    if not hmac.compare_digest(session.csrf, token):
        raise DomainError(
            Code.FORBIDDEN_SCOPE, "The form's CSRF token does not match this session; reload the page."
        )


async def sign_out(request: Request, response: Response, session: Session) -> None:
    async with request.app.state.db.transaction() as uow:
        await store.end_session(uow.conn, session.session_id)
    for name in (WRITE_COOKIE, READ_COOKIE):
        response.delete_cookie(name, path="/console")
