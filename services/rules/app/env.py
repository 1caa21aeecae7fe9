"""What every use case runs on: the ``Env`` (the store and the settings), built once at boot by
``rules.bootstrap``, and the Idempotency-Key runner over this store's table."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reviewloop.storage import Database, UnitOfWork
from reviewloop.storage.idempotency import Request, once
from reviewloop.tenancy import Principal
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store

DEFAULT_TOKEN_TTL_S = 15 * 60
REVIEW_STATE = "review_state"  # the outbox destination that learns of rule and category changes
NUDGE = "nudge"  # the outbox destination of broadcasts: the agents learn of them with no draft pending


@dataclass(frozen=True)
class Settings:
    """What the use cases are configured with (read from the environment by ``rules.bootstrap``)."""

    token_ttl_s: int = DEFAULT_TOKEN_TTL_S
    # The deployment secret every composition-token signing key is derived from (rules.domain.token):
    # REVIEWLOOP_COMPOSITION_TOKEN_KEY, or a generated <data dir>/composition-token-key. A fresh random
    # one when a test builds Settings directly.
    token_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)


@dataclass(frozen=True)
class Env:
    """The service's wiring, handed to every servicer and use case."""

    db: Database
    settings: Settings = field(default_factory=Settings)


async def idempotent(
    env: Env,
    principal: Principal,
    key: str,
    fields: Mapping[str, Any],
    act: Callable[[UnitOfWork], Awaitable[str]],
) -> str:
    """Run ``act`` (which returns the id it wrote) once per Idempotency-Key: a retry with the same
    body gets the same id, the same key with another body is ``idempotency_conflict``."""

    async def replay(conn: AsyncConnection, row: Row[Any]) -> str:
        return str(row.result_id)

    result_id, _ = await once(
        env.db,
        store.idempotency_keys,
        Request(principal.project_id, principal.actor_id, key, fields),
        act,
        lambda result_id: {"result_id": result_id},
        replay,
    )
    return result_id
