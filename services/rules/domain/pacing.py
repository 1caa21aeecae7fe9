"""Backlog pacing values, a project setting in the risk dial's family (NOTES.md: look-ahead window 3,
rework batch max 10, at least 5 s between nudges of one kind). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reviewloop.errors import invalid

# The built-in defaults, by the SDK's names (``CategoryPacingState``).
DEFAULTS: dict[str, int] = {
    "lookahead_window": 3,  # propagation nudges outstanding per category at a time
    "rework_batch_max": 10,  # the ceiling of any nudge's suggested_batch
    "nudge_min_interval_ms": 5_000,  # between two refills of a category's window
}
FIELDS = tuple(DEFAULTS)
BATCH_LIMIT = 100  # the most a save_rule may suggest; rework_batch_max bounds it further when nudged
# Upper bounds that keep a typo from fanning one rule out to the whole queue or stalling it for days.
_LIMITS = {
    "lookahead_window": (1, 100),
    "rework_batch_max": (1, BATCH_LIMIT),
    "nudge_min_interval_ms": (0, 3_600_000),
}


def validate(values: Mapping[str, Any], pointer: str) -> dict[str, int | None]:
    """Checked values; ``None`` is kept (it means: back to the default)."""
    out: dict[str, int | None] = {}
    for name, value in values.items():
        if name not in DEFAULTS:
            raise invalid(f"{pointer}/{name}", f"unknown pacing field; one of {', '.join(FIELDS)}")
        if value is None:
            out[name] = None
            continue
        low, high = _LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise invalid(f"{pointer}/{name}", f"must be a whole number from {low} to {high}")
        out[name] = value
    return out


def in_force(stored: Mapping[str, Any]) -> dict[str, int]:
    """Every value in force: the stored one where set, else the default."""
    return {name: int(stored[name]) if stored.get(name) is not None else DEFAULTS[name] for name in FIELDS}
