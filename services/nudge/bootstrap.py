"""The composition root: nudge's settings (``NudgeEnvironment``, read once at boot) wired into the ``Env``
its servicer and background jobs share.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from reviewloop.config import ConfigError, ServiceSettings, deployment_secret
from reviewloop.settings import CommaList, Text, variable
from reviewloop.ssrf import IpNetwork, parse_networks
from reviewloop.storage import Database

from nudge import webhooks
from nudge.app import Env, Settings

_NUDGE = Settings()
_WEBHOOKS = webhooks.WebhookSettings()


class NudgeEnvironment(ServiceSettings):
    """What the nudge process reads: compaction, and the webhook sender (issue 19)."""

    title = "nudge"

    nudge_retention_s: float = variable(
        "REVIEWLOOP_NUDGE_RETENTION_S",
        _NUDGE.retention.total_seconds(),
        "acked nudges older than this are compacted (un-acked ones never)",
        ge=0,
    )
    nudge_compact_every_s: float = variable(
        "REVIEWLOOP_NUDGE_COMPACT_EVERY_S",
        _NUDGE.compact_every_s,
        "How often the compaction sweep runs",
        gt=0,
    )
    webhook_key: Text = variable(
        "REVIEWLOOP_WEBHOOK_KEY",
        None,
        "the nudge service's key every webhook signing secret is derived from (none is stored)",
        unset="generated into `.data/webhook-key`",
    )
    webhook_allowed_networks: CommaList = variable(
        "REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS",
        (),
        "CIDRs webhooks may reach despite the SSRF rule (loopback, link-local, private ranges are refused), comma-separated",
        unset="none",
    )
    webhook_retry_for_s: float = variable(
        "REVIEWLOOP_WEBHOOK_RETRY_FOR_S",
        _WEBHOOKS.retry_for.total_seconds(),
        "how long a webhook delivery is retried before it is marked `failed`",
        ge=0,
    )
    webhook_backoff_s: float = variable(
        "REVIEWLOOP_WEBHOOK_BACKOFF_S", _WEBHOOKS.backoff_s, "The first retry's wait", gt=0
    )
    webhook_backoff_cap_s: float = variable(
        "REVIEWLOOP_WEBHOOK_BACKOFF_CAP_S", _WEBHOOKS.backoff_cap_s, "The longest retry wait", gt=0
    )
    webhook_timeout_s: float = variable(
        "REVIEWLOOP_WEBHOOK_TIMEOUT_S",
        _WEBHOOKS.timeout_s,
        "one webhook attempt's whole deadline: resolving, connecting, sending, the answer's headers and the prefix read of its body together (under 30, half the endpoint claim)",
        gt=0,
    )
    webhook_max_in_flight: int = variable(
        "REVIEWLOOP_WEBHOOK_MAX_IN_FLIGHT",
        _WEBHOOKS.max_in_flight,
        "webhook attempts in flight at once per nudge process, all endpoints together (each endpoint has one at a time: its deliveries go in order)",
        ge=1,
    )
    webhook_answer_prefix_bytes: int = variable(
        "REVIEWLOOP_WEBHOOK_ANSWER_PREFIX_BYTES",
        _WEBHOOKS.answer_prefix_bytes,
        "how much of a non-2xx webhook answer is read for the delivery log before the connection is closed (a 2xx is closed unread)",
        ge=0,
    )


def settings_from(read: NudgeEnvironment) -> Settings:
    """The use cases' settings, webhooks apart (:func:`webhook_settings`)."""
    return Settings(
        retention=timedelta(seconds=read.nudge_retention_s),
        compact_every_s=read.nudge_compact_every_s,
        # Received event ids are kept as long as the shared outbox retention.
        inbox_retention=timedelta(seconds=read.outbox_retention_s),
    )


def webhook_settings(read: NudgeEnvironment) -> webhooks.WebhookSettings:
    """The webhook sender's settings; its key is the deployment secret ``REVIEWLOOP_WEBHOOK_KEY``."""
    return webhooks.WebhookSettings(
        key=deployment_secret(read.webhook_key, "webhook-key", read.data_dir),
        allowed_networks=_networks("REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS", read.webhook_allowed_networks),
        retry_for=timedelta(seconds=read.webhook_retry_for_s),
        backoff_s=read.webhook_backoff_s,
        backoff_cap_s=read.webhook_backoff_cap_s,
        timeout_s=read.webhook_timeout_s,
        max_in_flight=read.webhook_max_in_flight,
        answer_prefix_bytes=read.webhook_answer_prefix_bytes,
    )


def _networks(variable: str, values: tuple[str, ...]) -> tuple[IpNetwork, ...]:
    try:
        return parse_networks(values)
    except ValueError as exc:
        raise ConfigError(f"{variable}: {exc}") from None


def bootstrap(db: Database, read: NudgeEnvironment) -> Env:
    """The production wiring of one process, with its settings ``read``."""
    return Env(db, dataclasses.replace(settings_from(read), webhooks=webhook_settings(read)))
