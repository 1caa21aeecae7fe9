"""Webhooks as data (issue 19, "Push"): signing in the Standard Webhooks layout, the secrets derived
from the deployment's key, and the retry schedule. (The SSRF rule for target addresses is
``reviewloop.ssrf``, shared with every server-side request made for a tenant.)

A signing secret must be recoverable to sign, so none is stored: each is derived, HMAC-SHA256 of the
deployment's webhook key over (endpoint, version, a random salt kept in the row). The store alone reveals
no secret; changing the webhook key changes every endpoint's secret (rotate them all after it)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from nudge.domain.reasons import RESERVED, Reason

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24
# A webhook may name only these reasons (the reserved ones are never emitted).
REASONS = frozenset(r.value for r in Reason if r not in RESERVED)
# Not a nudge: an auto-send in an ``auto_notify`` category, for the project's humans (issue 13). Only
# an endpoint that names it gets it (a receiver written for the agent's nudges never sees it).
HUMANS_NOTIFIED = "humans_notified"
# Not a nudge either: a reviewer escalated a draft to a person or role, with its deadline (issue 38).
ESCALATED = "escalated"
FOR_HUMANS = frozenset({HUMANS_NOTIFIED, ESCALATED})  # only an endpoint that names one gets it
EVENT_TYPES = REASONS | FOR_HUMANS


class Refused(ValueError):
    """A webhook's reasons this deployment does not know; the message says why."""


def derive_secret(key: bytes, endpoint_id: str, version: int, salt: str) -> str:
    """The ``whsec_...`` secret of one version of an endpoint's secret."""
    material = hmac.new(key, f"webhook-secret\0{endpoint_id}\0{version}\0{salt}".encode(), hashlib.sha256)
    return SECRET_PREFIX + base64.b64encode(material.digest()[:SECRET_BYTES]).decode()


def key_id(key: bytes) -> str:
    """A public name of the webhook key (not the key): a secret derived with another key is noticed."""
    return hmac.new(key, b"webhook-key-id", hashlib.sha256).hexdigest()[:16]


def sign(secrets: Iterable[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: ``v1,<base64 HMAC-SHA256>`` over ``id.timestamp.body`` per
    live secret, space-separated (two while a rotation's overlap lasts), each made by the Standard
    Webhooks library, so any receiver library of the scheme verifies it."""
    at = datetime.fromtimestamp(timestamp, UTC)
    return " ".join(Webhook(secret).sign(msg_id, at, body) for secret in secrets)


def check_reasons(reasons: Iterable[str]) -> list[str]:
    """The reasons an endpoint wants, deduplicated in order (none = every nudge reason), or Refused."""
    wanted = list(dict.fromkeys(reasons))
    unknown = [r for r in wanted if r not in EVENT_TYPES]
    if unknown:
        raise Refused(f"unknown reason {unknown[0]!r}; one of {', '.join(sorted(EVENT_TYPES))}")
    return wanted


def wants(reasons: Sequence[str], reason: str) -> bool:
    """Whether an endpoint asking for ``reasons`` gets an event of ``reason``: none asks for every
    nudge, the events for humans (``humans_notified``, ``escalated``) only where named."""
    if reason in FOR_HUMANS or reasons:
        return reason in reasons
    return True


def backoff_s(attempts: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """The wait before attempt ``attempts + 1``: exponential, capped, with "equal jitter" (half fixed,
    half random) so receivers coming back are not hit by every sender at once."""
    ceiling = min(cap_s, base_s * 2.0 ** max(attempts - 1, 0))
    jitter: float = (rng or random).uniform(0, ceiling / 2)
    return ceiling / 2 + jitter
