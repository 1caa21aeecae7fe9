"""What nudge's use cases run with: ``Settings`` (``nudge.bootstrap`` reads them from the environment)
and ``Env``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from reviewloop.storage import Database

from nudge import webhooks

WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Settings:
    """The nudge service's own configuration (``nudge.bootstrap`` reads it from the environment)."""

    # An acked nudge older than this is compacted; un-acked nudges are never dropped.
    retention: timedelta = WEEK
    compact_every_s: float = 60.0
    # Received event ids are kept as long as the shared outbox retention, like every other inbox.
    inbox_retention: timedelta = WEEK
    webhooks: webhooks.WebhookSettings = field(default_factory=webhooks.WebhookSettings)


@dataclass(frozen=True)
class Env:
    """What the servicer and the background jobs run with."""

    db: Database
    settings: Settings = field(default_factory=Settings)
