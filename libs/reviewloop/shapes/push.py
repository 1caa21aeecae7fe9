"""Pushed events (issue 19): the console's webhook endpoints and their deliveries."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from reviewloop.shapes._base import Shape

WEEK_S = 7 * 24 * 3600


# The nudge reasons a webhook may name (nudge.domain.webhooks.EVENT_TYPES: the reserved ones are never sent).
WebhookReason = Literal[
    "cancelled",
    "escalated",
    "feedback_added",
    "front_run_next",
    "humans_notified",
    "propagate_general_rule",
    "recheck_category",
    "redraft_requested",
    "rejected",
    "rule_changed",
    "send_failed",
    "sent",
]


class WebhookIn(Shape):
    """``register_webhook``: where to POST the project's events, and which (none = every nudge reason)."""

    url: str = Field(
        min_length=1,
        max_length=2000,
        pattern=r"^https?://([^\s/?#@:.\x00]{1,63}\.)*[^\s/?#@:.\x00]{1,63}(:[1-9][0-9]{0,4})?([/?#][^\s\x00]*)?$",
        description="http(s) with a host; private ranges are refused",
    )
    reasons: list[WebhookReason] = Field(
        default_factory=list,
        max_length=20,
        description="nudge reasons, and the events for the project's humans, each only where named: "
        "humans_notified (an auto_notify category's auto-send) and escalated (a draft escalated to a person "
        "or role, with its deadline); none: every nudge reason",
    )


class Webhook(Shape):
    """A registered endpoint; its secret is never shown again."""

    webhook_id: str
    project_id: str
    url: str
    reasons: list[str]
    created_at: datetime | None = None
    secret_version: int


class WebhookSecret(Shape):
    """``register_webhook`` and ``rotate_webhook_secret``: the endpoint and its new secret.

    The ``whsec_`` secret is shown once: a replay under the same Idempotency-Key answers
    ``secret: null`` and a ``note``.
    """

    webhook: Webhook
    secret: str | None
    note: str | None = None


class WebhookList(Shape):
    """``list_webhooks``."""

    webhooks: list[Webhook]


class RotateWebhookSecretIn(Shape):
    """How long the current secret keeps signing beside the new one (a second signature)."""

    overlap_s: float = Field(default=24 * 3600, ge=0, le=WEEK_S, allow_inf_nan=False)


class WebhookDelivery(Shape):
    """One nudge's (or broadcast's) delivery to an endpoint.

    ``pending`` (retrying), ``delivered`` (2xx) or ``failed`` (retried for the deployment's bound;
    not sent again).
    """

    event_id: str = Field(description="The webhook-id header: stable across retries, dedupe on it.")
    reason: str
    review_id: str | None = Field(default=None, description="absent on a broadcast (seq 0)")
    status: str = Field(description="pending | delivered | failed")
    attempts: int
    last_status: int | None = None
    last_error: str | None = None
    created_at: datetime | None = None
    next_attempt_at: datetime | None = None
    finished_at: datetime | None = None


class WebhookDeliveryList(Shape):
    """``list_webhook_deliveries``, newest first."""

    deliveries: list[WebhookDelivery]


class WebhookDeleted(Shape):
    """``delete_webhook``."""

    webhook_id: str
    deleted: bool
