"""Backlog pacing (spec 000 "backlog reconciliation + pacing"; NOTES.md: look-ahead window 3, rework
batch max 10, at least 5 s between nudges of one kind per category). Pure.

A rule change never nudges the whole queue: each category keeps at most ``lookahead_window`` of its stale
drafts nudged (in flight) at a time; a slot opens as the agent redrafts or restamps one (or it leaves
pending), and the window is refilled no sooner than ``nudge_min_interval_ms`` after its last refill.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

# Used until the sweep has read the project's values from the rules context (the same defaults).
DEFAULT_LOOKAHEAD = 3
DEFAULT_REWORK_BATCH_MAX = 10
DEFAULT_MIN_INTERVAL_MS = 5_000


@dataclass(frozen=True)
class StaleDraft:
    """A pending draft composed under an older rule high-water than its scope now requires."""

    review_id: str
    project_id: str
    category_id: str
    required_high_water: int
    rule: dict[str, Any]  # the rule that moved last, as its nudge names it (id, rule_text, lineage_id ...)
    reason: str  # the nudge it is owed: propagate_general_rule | rule_changed
    propagate: bool  # False: held from release, never nudged (save_rule's propagate_to_pending)
    suggested_batch: int  # as the rule's save asked; 0: the look-ahead window
    nudged_at: datetime | None = None  # set while it holds a slot


@dataclass(frozen=True)
class Window:
    """One category's pacing: the values in force and where the agent is."""

    project_id: str
    category_id: str
    org_id: str
    lookahead_window: int = DEFAULT_LOOKAHEAD
    rework_batch_max: int = DEFAULT_REWORK_BATCH_MAX
    nudge_min_interval_ms: int = DEFAULT_MIN_INTERVAL_MS
    last_nudged_at: datetime | None = None
    cursor_review_id: str = ""
    cursor_advanced_count: int = 0

    def room(self, in_flight: int, now: datetime) -> int:
        """How many stale drafts may be nudged now: the free slots, once the interval since the last
        refill has passed (0 before then: a later refill, or the sweep, comes back)."""
        interval = timedelta(milliseconds=self.nudge_min_interval_ms)
        if self.last_nudged_at is not None and now - self.last_nudged_at < interval:
            return 0
        return max(0, self.lookahead_window - in_flight)

    def next_refill_at(self) -> datetime | None:
        if self.last_nudged_at is None:
            return None
        return self.last_nudged_at + timedelta(milliseconds=self.nudge_min_interval_ms)

    def suggested_batch(self, asked: int) -> int:
        """The batch a propagation nudge suggests: as the rule's save asked (else the look-ahead
        window), never above the rework batch ceiling."""
        return max(1, min(asked or self.lookahead_window, self.rework_batch_max))
