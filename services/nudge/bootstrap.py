"""The composition root: the one place that reads nudge's environment and wires the ``Env`` its
servicer and background jobs share.

``REVIEWLOOP_NUDGE_RETENTION_S`` is the age after which an acked nudge is compacted (default 7 days;
un-acked nudges are never dropped), ``REVIEWLOOP_NUDGE_COMPACT_EVERY_S`` how often the sweep runs
(default 60 s).

And the webhook sender (issue 19): ``REVIEWLOOP_WEBHOOK_KEY`` derives every signing secret (default: a
key generated into ``<data dir>/webhook-key``, mode 0600; the store holds no secret),
``REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS`` the CIDRs allowed despite the SSRF rule (default none),
``REVIEWLOOP_WEBHOOK_RETRY_FOR_S`` how long a delivery is retried (default 1 day),
``REVIEWLOOP_WEBHOOK_BACKOFF_S``/``_BACKOFF_CAP_S`` the first and the longest retry wait (1 s, 600 s),
``REVIEWLOOP_WEBHOOK_TIMEOUT_S`` one attempt's whole deadline (10 s, under half the 60 s endpoint claim),
``REVIEWLOOP_WEBHOOK_MAX_IN_FLIGHT`` attempts at once in this process (32; one per endpoint),
``REVIEWLOOP_WEBHOOK_ANSWER_PREFIX_BYTES`` how much of an answer not acked is read for the log (512).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from datetime import timedelta

from reviewloop.config import ServiceConfig, deployment_secret
from reviewloop.ssrf import parse_networks
from reviewloop.storage import Database

from nudge import webhooks
from nudge.app import Env, Settings


def settings_from(environ: Mapping[str, str]) -> Settings:
    defaults = Settings()
    retention_s = environ.get("REVIEWLOOP_NUDGE_RETENTION_S", defaults.retention.total_seconds())
    return Settings(
        retention=timedelta(seconds=float(retention_s)),
        compact_every_s=float(environ.get("REVIEWLOOP_NUDGE_COMPACT_EVERY_S", defaults.compact_every_s)),
        # The shared outbox retention, read without the rest of ServiceConfig (which needs the address).
        inbox_retention=timedelta(
            seconds=float(environ.get("REVIEWLOOP_OUTBOX_RETENTION_S", ServiceConfig.outbox_retention_s))
        ),
    )


def webhook_key(environ: Mapping[str, str]) -> bytes:
    """``REVIEWLOOP_WEBHOOK_KEY``, or the one in ``<data dir>/webhook-key``, generated when absent (the
    same deployment-secret rule as the rules service's composition-token key)."""
    return deployment_secret("REVIEWLOOP_WEBHOOK_KEY", "webhook-key", environ)


def webhook_settings(environ: Mapping[str, str]) -> webhooks.WebhookSettings:
    defaults = webhooks.WebhookSettings()
    return webhooks.WebhookSettings(
        key=webhook_key(environ),
        allowed_networks=parse_networks(environ.get("REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS", "").split(",")),
        retry_for=timedelta(
            seconds=float(environ.get("REVIEWLOOP_WEBHOOK_RETRY_FOR_S", defaults.retry_for.total_seconds()))
        ),
        backoff_s=float(environ.get("REVIEWLOOP_WEBHOOK_BACKOFF_S", defaults.backoff_s)),
        backoff_cap_s=float(environ.get("REVIEWLOOP_WEBHOOK_BACKOFF_CAP_S", defaults.backoff_cap_s)),
        timeout_s=float(environ.get("REVIEWLOOP_WEBHOOK_TIMEOUT_S", defaults.timeout_s)),
        max_in_flight=int(environ.get("REVIEWLOOP_WEBHOOK_MAX_IN_FLIGHT", defaults.max_in_flight)),
        answer_prefix_bytes=int(
            environ.get("REVIEWLOOP_WEBHOOK_ANSWER_PREFIX_BYTES", defaults.answer_prefix_bytes)
        ),
    )


def bootstrap(db: Database, environ: Mapping[str, str] = os.environ) -> Env:
    """The production wiring of one process."""
    settings = dataclasses.replace(settings_from(environ), webhooks=webhook_settings(environ))
    return Env(db, settings)
