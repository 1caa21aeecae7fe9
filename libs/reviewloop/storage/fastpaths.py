"""The storage fast paths, one switch each: ``REVIEWLOOP_SLOW_PATHS`` names those to turn off.

Each fast path does what a plainer one does, in fewer round trips or less CPU; docs/performance.md lists
them with what each saves and the test that holds it equal to the plain path. Turning one off (a comma
list of names, or ``all``) runs the plain path instead: to rule one out when something looks wrong, or
to measure what it is worth. The process's settings read the variable once (``slow_paths``); its composition
root hands the set on when it builds the store (``make_engine``, ``Database``), never per call.
"""

from __future__ import annotations

from collections.abc import Iterable

ENV = "REVIEWLOOP_SLOW_PATHS"

DRIVER = "driver"  # PostgreSQL statements run on asyncpg, below SQLAlchemy's execution (driver.py)
SQLITE_ONE_CROSSING = "sqlite_one_crossing"  # one thread crossing per SQLite statement (sqlite.py)
AUTOCOMMIT = "autocommit"  # one-statement work without BEGIN (PostgreSQL: autocommit; SQLite: reads)
LAST = "last"  # a compare-and-set and the unit's queued rows in one statement (UnitOfWork.last)
BATCH_INGEST = "batch_ingest"  # nudge stores a relay's batch set-based on PostgreSQL

NAMES = (DRIVER, SQLITE_ONE_CROSSING, AUTOCOMMIT, LAST, BATCH_INGEST)
ALL = frozenset(NAMES)


class UnknownFastPath(ValueError):
    """``REVIEWLOOP_SLOW_PATHS`` names something that is not a fast path."""


def enabled(off: Iterable[str] = ()) -> frozenset[str]:
    """The fast paths that are on: every one of ``NAMES`` that ``off`` (``REVIEWLOOP_SLOW_PATHS``) does not name."""
    off = {name.strip() for name in off if name.strip()}
    if "all" in off:
        return frozenset()
    unknown = off - ALL
    if unknown:
        raise UnknownFastPath(
            f"{ENV} names {sorted(unknown)}; the fast paths are {', '.join(NAMES)} (or all)"
        )
    return ALL - off
