"""Composition-token keys: the salts signing keys are derived from (never a key), and the retirement
of legacy keys kept in plain."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from reviewloop.storage.schema import utcnow
from sqlalchemy import (
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rules.store.tables import token_keys


@dataclass(frozen=True)
class TokenKey:
    """A composition-token key's row: derived (``salt`` and ``key_ref``) or legacy (``secret``)."""

    key_id: str
    salt: str | None
    key_ref: str | None
    secret: bytes | None
    retire_at: datetime | None


def _token_key(row: Any) -> TokenKey:
    return TokenKey(
        row.key_id, row.salt, row.key_ref, bytes.fromhex(row.secret) if row.secret else None, row.retire_at
    )


async def newest_token_key(conn: AsyncConnection, key_ref: str) -> TokenKey | None:
    """The newest key derived under the deployment key named ``key_ref``: the one that signs."""
    t = token_keys.c
    row = (
        await conn.execute(
            select(token_keys)
            .where(t.key_ref == key_ref, t.salt.is_not(None))
            .order_by(t.created_at.desc(), t.key_id.desc())
            .limit(1)
        )
    ).first()
    return _token_key(row) if row else None


async def token_key(conn: AsyncConnection, key_id: str) -> TokenKey | None:
    row = (await conn.execute(select(token_keys).where(token_keys.c.key_id == key_id))).first()
    return _token_key(row) if row else None


async def add_token_key(conn: AsyncConnection, key_id: str, salt: str, key_ref: str) -> None:
    await conn.execute(
        insert(token_keys).values(key_id=key_id, salt=salt, key_ref=key_ref, secret=None, created_at=utcnow())
    )


async def retire_legacy_token_keys(conn: AsyncConnection, now: datetime, grace_s: int) -> None:
    """The migration path of keys kept in plain: each verifies for one token lifetime after the first
    boot that derives keys (the tokens already out), signs nothing, and is then wiped."""
    t = token_keys.c
    await conn.execute(
        update(token_keys)
        .where(t.secret.is_not(None), t.retire_at.is_(None))
        .values(retire_at=now + timedelta(seconds=grace_s))
    )
    await conn.execute(
        update(token_keys).where(t.secret.is_not(None), t.retire_at <= now).values(secret=None)
    )
