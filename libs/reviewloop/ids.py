"""Opaque, typed, time-sortable ids: ``rr_01J...`` (a ULID behind a type prefix)."""

import os
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

# Every id type the contexts mint. Review-session (rvs) and lineage (rvl) ids are dispatch_budget's (spec 003).
PREFIXES = frozenset(
    [
        "rr",
        "turn",
        "cat",
        "rule",
        "rln",
        "ndg",
        "msg",
        "thread",
        "org",
        "prj",
        "agt",
        "key",
        "rcpt",
        "evt",
        "gprop",
        "ck",
        "rvs",
        "rvl",
        "whk",
        "lse",
        "cmg",  # a category merge (its audit entry)
    ]
)


def new_id(prefix: str) -> str:
    """Return ``<prefix>_<ulid>``: 48 bits of milliseconds then 80 random bits, so ids sort by time."""
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def id_pattern(prefix: str) -> str:
    """A regular expression (unanchored) of the ids ``new_id(prefix)`` mints, for a published schema."""
    return prefix + "_[0-9A-HJKMNP-TV-Z]{26}"


def has_prefix(value: str, prefix: str) -> bool:
    """True when ``value`` looks like an id of the given type (shape only, not existence)."""
    head, sep, body = value.partition("_")
    return bool(sep) and head == prefix and len(body) == 26 and all(c in _CROCKFORD for c in body)
