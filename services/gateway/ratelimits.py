"""The agent plane's rate limits (issue 36): per key and per project, with the spec's ``429 rate_limited``.

The windows are counted by the maintained ``limits`` library (its fixed-window strategy) in the gateway's
own store, so every replica of the gateway counts the same windows. ``limits`` ships storages for memory,
Redis, Memcached and MongoDB, none of which a deployment runs, and none for a SQL database; the deployment
already has PostgreSQL behind the gateway (SQLite when embedded). So ``StoreStorage`` implements ``limits``'
async storage interface over that store: a hit is one upsert that starts a new window once the last one
has expired (one round trip, atomic on both databases), and no new server is needed. A request's windows
(its key's and its project's) are counted in one such upsert (``incr_many``), as limits' fixed-window
strategy would count each.

Limited verbs (``LIMITED``): submits (send, reply, forward, a redraft), waits, acks and rule writes. Each
request of one is counted twice, once for its key and once for its project; past either limit it is
refused ``429 rate_limited`` with ``Retry-After`` (the seconds left in the window) before it reaches a
service. The bootstrap admin token (the operator) is not limited. Windows use the gateway's clock (unix
seconds): replicas' clocks are kept in step by NTP, and a window is a minute, not a millisecond.
"""

from __future__ import annotations

import functools
import math
import random
import re
import time
from collections.abc import Mapping

from limits import RateLimitItem, parse_many
from limits.aio.storage import Storage
from limits.aio.strategies import FixedWindowRateLimiter
from reviewloop.errors import Code, DomainError
from reviewloop.storage import Database
from sqlalchemy import TextClause, delete, func, select, text
from sqlalchemy.exc import SQLAlchemyError

from gateway.auth import Caller
from gateway.settings import rate_limit_env
from gateway.store import rate_limit_counters

# (verb class, methods, path): the agent plane's verbs a tenant could repeat to hold the others hostage.
LIMITED: tuple[tuple[str, frozenset[str], re.Pattern[str]], ...] = (
    (
        "submit",
        frozenset({"POST"}),
        re.compile(
            r"^/v1/(messages|messages/[^/]+/(reply|forward)|threads/[^/]+/reply|reviews/[^/]+/revisions)$"
        ),
    ),
    ("wait", frozenset({"GET"}), re.compile(r"^/v1/review-events/wait$")),
    ("ack", frozenset({"POST"}), re.compile(r"^/v1/review-events/ack$")),
    (
        "rule_write",
        frozenset({"POST", "PUT", "PATCH", "DELETE"}),
        re.compile(r"^/v1/(rules|rules/.+|reviews/[^/]+/rules)$"),
    ),
)

# One hit in this many also deletes the windows that ended (the table holds live windows only).
SWEEP_ONE_IN = 500


@functools.cache
def _incr(windows: int) -> TextClause:
    """One upsert counting a hit in each of ``windows`` windows (a new one where the last has ended)."""
    rows = ", ".join(f"(:key{i}, :amount, :expires_at{i})" for i in range(windows))
    return text(
        f"""
        INSERT INTO rate_limit_counters (limit_key, hits, expires_at) VALUES {rows}
        ON CONFLICT (limit_key) DO UPDATE SET
          hits = CASE WHEN rate_limit_counters.expires_at <= :now THEN excluded.hits
                      ELSE rate_limit_counters.hits + excluded.hits END,
          expires_at = CASE WHEN rate_limit_counters.expires_at <= :now THEN excluded.expires_at
                            ELSE rate_limit_counters.expires_at END
        RETURNING limit_key, hits
        """
    )


def verb_class(method: str, path: str) -> str | None:
    """The limited verb class of ``method path`` (``submit``, ``wait``, ``ack``, ``rule_write``), if any."""
    for name, methods, pattern in LIMITED:
        if method in methods and pattern.match(path):
            return name
    return None


class StoreStorage(Storage):
    """``limits``' async storage over the gateway's store (PostgreSQL, or SQLite when embedded)."""

    STORAGE_SCHEME = ["reviewloop+gateway-store"]  # registered by limits' metaclass; built directly here

    def __init__(self, db: Database) -> None:
        super().__init__()
        self.db = db

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return SQLAlchemyError

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Count ``amount`` hits on ``key``'s window, opening a new one of ``expiry`` s if it ended."""
        return (await self.incr_many({key: expiry}, amount))[key]

    async def incr_many(self, windows: Mapping[str, int], amount: int = 1) -> dict[str, int]:
        """``incr`` of each key of ``windows`` (key -> expiry in s) in one statement: the hits of each."""
        now = time.time()
        params: dict[str, object] = {"amount": amount, "now": now}
        # In key order: two requests upserting the same rows lock them in the same order, never deadlock.
        for i, (key, expiry) in enumerate(sorted(windows.items())):
            params[f"key{i}"], params[f"expires_at{i}"] = key, now + expiry
        async with self.db.one_statement() as conn:
            hits = dict((await conn.execute(_incr(len(windows)), params)).tuples().all())
        if random.randrange(SWEEP_ONE_IN) == 0:
            async with self.db.one_statement() as conn:
                await conn.execute(delete(rate_limit_counters).where(rate_limit_counters.c.expires_at <= now))
        return {key: int(n) for key, n in hits.items()}

    async def get(self, key: str) -> int:
        """The hits in ``key``'s live window (0 when it has none)."""
        async with self.db.single_statement.connect() as conn:
            hits = (
                await conn.execute(
                    select(rate_limit_counters.c.hits).where(
                        rate_limit_counters.c.limit_key == key, rate_limit_counters.c.expires_at > time.time()
                    )
                )
            ).scalar()
        return int(hits or 0)

    async def get_expiry(self, key: str) -> float:
        """When ``key``'s window ends (unix seconds; now when it has none)."""
        now = time.time()
        async with self.db.single_statement.connect() as conn:
            expires_at = (
                await conn.execute(
                    select(rate_limit_counters.c.expires_at).where(rate_limit_counters.c.limit_key == key)
                )
            ).scalar()
        return max(float(expires_at or now), now)

    async def check(self) -> bool:
        """Whether the store answers."""
        try:
            async with self.db.single_statement.connect() as conn:
                await conn.execute(select(func.count()).select_from(rate_limit_counters))
        except SQLAlchemyError:
            return False
        return True

    async def reset(self) -> int | None:
        """Forget every window."""
        async with self.db.one_statement() as conn:
            return (await conn.execute(delete(rate_limit_counters))).rowcount

    async def clear(self, key: str) -> None:
        """Forget ``key``'s window."""
        async with self.db.one_statement() as conn:
            await conn.execute(delete(rate_limit_counters).where(rate_limit_counters.c.limit_key == key))


class RateLimits:
    """The agent plane's limits of one gateway, counted in its store (shared by every replica)."""

    def __init__(self, db: Database, settings: Mapping[str, str]) -> None:
        self.storage = StoreStorage(db)
        self.limiter = FixedWindowRateLimiter(self.storage)
        self.items: dict[str, list[RateLimitItem]] = {
            name: parse_many(value) for name, value in settings.items() if value.strip().lower() != "off"
        }

    async def check(self, verb: str, caller: Caller) -> None:
        """Count one ``verb`` of ``caller`` against its key's and its project's limits; past either,
        ``DomainError(rate_limited)`` carrying the ``retry_after`` seconds (the problem's Retry-After)."""
        principal = caller.principal
        if principal is None:
            return  # the bootstrap admin token: the deployment's operator
        scopes = (("per_key", caller.key_id or principal.actor_id), ("per_project", principal.project_id))
        counted = [
            (f"{verb}_{scope}", item, ident)
            for scope, ident in scopes
            for item in self.items.get(f"{verb}_{scope}", ())
        ]
        if not counted:
            return
        # limits' FixedWindowRateLimiter.hit, for every window of the request in one round trip.
        keys = [item.key_for(name, ident) for name, item, ident in counted]
        hits = await self.storage.incr_many(
            {key: item.get_expiry() for key, (_, item, _) in zip(keys, counted, strict=True)}
        )
        refused = [c for c, key in zip(counted, keys, strict=True) if hits[key] > c[1].amount]
        if not refused:
            return
        now = time.time()
        resets = [
            (await self.limiter.get_window_stats(item, name, ident)).reset_time
            for name, item, ident in refused
        ]
        retry_after = max(1, math.ceil(max(resets) - now))
        name, item, _ = refused[0]
        raise DomainError(
            Code.RATE_LIMITED,
            f"Too many {verb.replace('_', ' ')} requests: the {name.replace('_', ' ')} limit is {item} "
            f"({rate_limit_env(name)}); retry after {retry_after} s.",
            hints=(("retry_after", str(retry_after)),),
        )
