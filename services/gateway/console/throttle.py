"""Who may try to sign in to the console, and how often (issue 38).

A sign-in POST from another site (its ``Sec-Fetch-Site``, or failing that its ``Origin``) is refused
before any key is looked at: a forged form must not set session cookies in a reviewer's browser.
Attempts are limited per client address and per key prefix (the first characters of what was pasted,
so one key cannot be hammered from many addresses), over a fixed window counted in the gateway's store
through the agent plane's ``limits`` storage (``ratelimits.StoreStorage``), so every gateway replica
counts the same window; a refusal answers ``429`` with ``Retry-After``.
"""

from __future__ import annotations

import math
import time
from urllib.parse import urlsplit

from fastapi import Request
from limits import parse
from limits.aio.strategies import FixedWindowRateLimiter
from reviewloop.errors import Code, DomainError
from reviewloop.storage import Database

from gateway.ratelimits import StoreStorage

PER_ADDRESS = "30/minute"
PER_KEY_PREFIX = "10/minute"
KEY_PREFIX_CHARS = 12  # "rlk_" and 8 characters of the secret: a key's, not every key's


def cross_site(request: Request) -> bool:
    """Whether the request came from another site's page (a same-origin form, or a typed URL, is not)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False  # no browser metadata at all (a script or an old client): the key still has to match
    if origin == "null":
        return True  # a sandboxed or opaque page
    return urlsplit(origin).netloc.lower() != (request.headers.get("host") or "").lower()


class SignInThrottle:
    """The windows of sign-in attempts, per address and per key prefix, in the gateway's store."""

    def __init__(
        self, db: Database, per_address: str = PER_ADDRESS, per_key_prefix: str = PER_KEY_PREFIX
    ) -> None:
        self._limiter = FixedWindowRateLimiter(StoreStorage(db))
        self._limits = (("address", parse(per_address)), ("key", parse(per_key_prefix)))

    async def attempt(self, address: str, key: str) -> None:
        """Count one attempt; ``DomainError(rate_limited)`` with its ``retry_after`` (nothing counted) when
        either window is full."""
        ids = {"address": address or "unknown", "key": key.strip()[:KEY_PREFIX_CHARS]}
        for what, limit in self._limits:
            if not await self._limiter.test(limit, "console-sign-in", what, ids[what]):
                stats = await self._limiter.get_window_stats(limit, "console-sign-in", what, ids[what])
                wait = max(1, math.ceil(stats.reset_time - time.time()))
                whom = "this address" if what == "address" else "this key"
                raise DomainError(
                    Code.RATE_LIMITED,
                    f"Too many sign-in attempts from {whom}; try again in {wait} s.",
                    hints=(("retry_after", str(wait)),),  # the problem's Retry-After, as every 429's
                )
        for what, limit in self._limits:
            await self._limiter.hit(limit, "console-sign-in", what, ids[what])
