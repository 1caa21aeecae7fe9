"""The nudge service's webhook messages as ``Webhook`` and ``WebhookDelivery``."""

from __future__ import annotations

from reviewloop.nudge.v1 import nudge_pb2

from gateway.translate import Json, present, timestamp


def as_webhook(webhook: nudge_pb2.Webhook) -> Json:
    return {
        "webhook_id": webhook.id,
        "project_id": webhook.project_id,
        "url": webhook.url,
        "reasons": list(webhook.reasons),
        "created_at": timestamp(webhook.created_at),
        "secret_version": webhook.secret_version,
    }


def as_delivery(delivery: nudge_pb2.WebhookDelivery) -> Json:
    body: Json = {
        "event_id": delivery.event_id,
        "reason": delivery.reason,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "created_at": timestamp(delivery.created_at),
    }
    # A broadcast belongs to no review.
    body.update(present(delivery, "review_id", "last_status", "last_error"))
    for name in ("next_attempt_at", "finished_at"):
        if delivery.HasField(name):
            body[name] = timestamp(getattr(delivery, name))
    return body
