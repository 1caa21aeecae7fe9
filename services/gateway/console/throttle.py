"""Who may try to sign in to the console, and how often (issue 38).

A sign-in POST from another site (its ``Sec-Fetch-Site``, or failing that its ``Origin``) is refused
before any key is looked at: a forged form must not set session cookies in a reviewer's browser.
Attempts are limited per client address and per key prefix (the first characters of what was pasted,
so one key cannot be hammered from many addresses), over a moving window in this gateway process
(``limits``); a refusal answers ``429`` with ``Retry-After``. Each gateway replica keeps its own window.
"""

from __future__ import annotations

import math
import time
from urllib.parse import urlsplit

from fastapi import Request
from limits import parse, storage, strategies
from reviewloop.errors import Code, DomainError

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
    """The moving windows of sign-in attempts, per address and per key prefix."""

    def __init__(self, per_address: str = PER_ADDRESS, per_key_prefix: str = PER_KEY_PREFIX) -> None:
        self._limiter = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
        self._limits = (("address", parse(per_address)), ("key", parse(per_key_prefix)))

    def attempt(self, address: str, key: str) -> None:
        """Count one attempt; ``DomainError(rate_limited)`` with its ``retry_after`` (nothing counted) when
        either window is full."""
        ids = {"address": address or "unknown", "key": key.strip()[:KEY_PREFIX_CHARS]}
        for what, limit in self._limits:
            if not self._limiter.test(limit, "console-sign-in", what, ids[what]):
                reset, _ = self._limiter.get_window_stats(limit, "console-sign-in", what, ids[what])
                wait = max(1, math.ceil(reset - time.time()))
                whom = "this address" if what == "address" else "this key"
                raise DomainError(
                    Code.RATE_LIMITED,
                    f"Too many sign-in attempts from {whom}; try again in {wait} s.",
                    hints=(("retry_after", str(wait)),),  # the problem's Retry-After, as every 429's
                )
        for what, limit in self._limits:
            self._limiter.hit(limit, "console-sign-in", what, ids[what])
