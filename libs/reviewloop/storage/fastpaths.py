"""The storage fast paths, one switch each: ``REVIEWLOOP_SLOW_PATHS`` names those to turn off.

Each fast path does what a plainer one does, in fewer round trips or less CPU; docs/performance.md lists
them with what each saves and the test that holds it equal to the plain path. Turning one off (a comma
list of names, or ``all``) runs the plain path instead: to rule one out when something looks wrong, or
to measure what it is worth. Read when a store is built (``make_engine``, ``Database``), never per call.
"""

from __future__ import annotations

import os

ENV = "REVIEWLOOP_SLOW_PATHS"

DRIVER = "driver"  # PostgreSQL statements run on asyncpg, below SQLAlchemy's execution (driver.py)
SQLITE_ONE_CROSSING = "sqlite_one_crossing"  # one thread crossing per SQLite statement (sqlite.py)
AUTOCOMMIT = "autocommit"  # one-statement work without BEGIN (PostgreSQL: autocommit; SQLite: reads)
LAST = "last"  # a compare-and-set and the unit's queued rows in one statement (UnitOfWork.last)
BATCH_INGEST = "batch_ingest"  # nudge stores a relay's batch set-based on PostgreSQL

NAMES = (DRIVER, SQLITE_ONE_CROSSING, AUTOCOMMIT, LAST, BATCH_INGEST)


class UnknownFastPath(ValueError):
    """``REVIEWLOOP_SLOW_PATHS`` names something that is not a fast path."""


def enabled(environ: os._Environ[str] | dict[str, str] | None = None) -> frozenset[str]:
    """The fast paths that are on: every one of ``NAMES`` that ``REVIEWLOOP_SLOW_PATHS`` does not name."""
    raw = (os.environ if environ is None else environ).get(ENV, "")
    off = {name.strip() for name in raw.split(",") if name.strip()}
    if "all" in off:
        return frozenset()
    unknown = off - set(NAMES)
    if unknown:
        raise UnknownFastPath(
            f"{ENV} names {sorted(unknown)}; the fast paths are {', '.join(NAMES)} (or all)"
        )
    return frozenset(NAMES) - off
