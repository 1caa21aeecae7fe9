"""Whether an error means the store did not answer, so the call may be retried.

Such a call answers ``unavailable`` (gRPC UNAVAILABLE, 503 with Retry-After), never ``internal``.

A server at its connection limit, starting or shutting down, a connection it dropped, no pooled connection
free within the pool's timeout, a SQLite file locked past the busy timeout: each is the deployment's
weather, not a bug of the call, and a client's keyed retry is the remedy. A unit cut short by one of them
rolled back (or, at COMMIT, is uncertain, which is what ``unavailable`` tells a keyed client to retry).
"""

from __future__ import annotations

import sqlite3

import asyncpg.exceptions as pg
from sqlalchemy import exc as sa

_NOT_ANSWERING = (
    pg.InsufficientResourcesError,  # too many connections (server or database limit), disk or memory full
    pg.OperatorInterventionError,  # starting up, shutting down, terminated by an administrator
    pg.PostgresConnectionError,  # the connection failed or no longer exists
    sa.TimeoutError,  # no pooled connection free within the pool's timeout
    ConnectionError,  # refused or reset before the server said anything
)


def store_unavailable(error: BaseException) -> bool:
    """Whether ``error``, or what it wraps (SQLAlchemy's ``orig``, a cause or context), says the store is away."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _NOT_ANSWERING):
            return True
        if isinstance(current, sa.DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(current, sqlite3.OperationalError) and "locked" in str(current):
            return True
        orig = current.orig if isinstance(current, sa.DBAPIError) else None
        current = orig or current.__cause__ or current.__context__
    return False
