"""What the use cases run in: review_state's settings and the ports to the world it does not own."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from reviewloop.storage import Database

from review_state.app.stacks import RuleStacks
from review_state.clients import Collaborators
from review_state.domain.review import Review
from review_state.providers import Provider


@dataclass(frozen=True)
class Settings:
    """review_state's own configuration, read once at boot (``bootstrap.settings_from_env``)."""

    from_address: str = "agent@reviewloop.local"
    outbound_quota_per_day: int = 10_000
    # A delivery worker's claim; renewed while it lives, so a dead worker's attempt is claimed again
    # (by the sweep, on any replica) within about this long.
    delivery_lease: timedelta = timedelta(seconds=10)
    # How long a decision or a release waits for its delivery before answering with it still going.
    delivery_wait_s: float = 5.0
    # Tries that never reached DATA (relay down, 4xx) before the review fails; retries back off.
    delivery_max_tries: int = 8
    delivery_retry_base_s: float = 2.0
    # The sweep: due and orphaned attempts, and the evidence for parked ones.
    sweep_interval_s: float = 5.0
    # The pacing sweep: windows whose minimum interval has passed are refilled within about this long.
    pacing_sweep_interval_s: float = 1.0
    # How long a new draft's rule high-water is remembered (``RuleStacks``); 0: ask rules every submit.
    rule_stack_ttl_s: float = 5.0
    # The undo window (issue 38): a reviewer's approve or edit goes to delivery this long after it,
    # and its decider may take it back until then; 0 releases at once.
    undo_window_s: float = 10.0


@dataclass
class Env:
    """The store, the other contexts, the mail provider and the settings; built in ``bootstrap``."""

    db: Database
    peers: Collaborators
    provider: Provider
    settings: Settings = field(default_factory=Settings)
    # This process's delivery workers, by review id: one per attempt, outside any request's scope.
    workers: dict[str, asyncio.Task[Review | None]] = field(default_factory=dict)
    # This process's timers for releases in their undo window (``undo.release_later``), by review id.
    releases: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    stacks: RuleStacks = field(init=False)

    def __post_init__(self) -> None:
        self.stacks = RuleStacks(self.settings.rule_stack_ttl_s)
