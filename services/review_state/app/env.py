"""What the use cases run in: review_state's settings and the ports to the world it does not own."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from reviewloop.storage import Database

from review_state.clients import Collaborators
from review_state.providers import Provider


@dataclass(frozen=True)
class Settings:
    """review_state's own configuration, read once at boot (``bootstrap.settings_from_env``)."""

    from_address: str = "agent@reviewloop.local"
    outbound_quota_per_day: int = 10_000
    # An in-flight attempt older than this has an unknown outcome and is reconciled by Message-ID.
    reconcile_after: timedelta = timedelta(seconds=60)
    # A parked attempt the provider cannot confirm by then is closed as failed (never resent).
    reconcile_deadline: timedelta = timedelta(hours=1)
    sweep_interval_s: float = 15.0


@dataclass
class Env:
    """The store, the other contexts, the mail provider and the settings; built in ``bootstrap``."""

    db: Database
    peers: Collaborators
    provider: Provider
    settings: Settings = field(default_factory=Settings)
