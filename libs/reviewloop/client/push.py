"""Pushed events, client side: the event stream's resumption across connections, and webhook verification."""

from __future__ import annotations

import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx_sse
import standardwebhooks

from reviewloop.client.problems import ReviewloopError
from reviewloop.shapes import ReviewEvent

STREAM_PATH = "/v1/review-events/stream"
# A refused stream that is worth opening again after its Retry-After: the service is briefly down, or
# the project holds as many open streams as the gateway allows.
_STREAM_RETRIED = frozenset({"unavailable", "rate_limited"})
# How long a connection may take to open; reading waits up to the stream's idle timeout.
_OPEN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class StreamedEvent:
    """One event of :meth:`AsyncReviewloop.stream`: ``id`` is its resume point (``last_event_id``)."""

    id: str
    event: ReviewEvent


class Resumption:
    """Where an event stream stands across its connections, with no I/O.

    Each client's ``stream`` opens :meth:`request`, hands a refusal to :meth:`refused` and each event to
    :meth:`take`, then waits ``wait_s`` and opens again, resuming right after the last event taken (no gap,
    no repeat).
    """

    def __init__(
        self, headers: Mapping[str, str], last_event_id: str | None, reconnect_s: float, idle_timeout_s: float
    ) -> None:
        self.headers = {**headers, "Accept": "text/event-stream"}
        self.cursor = last_event_id
        self.reconnect_s = reconnect_s
        self.timeout = httpx.Timeout(_OPEN_TIMEOUT_S, read=idle_timeout_s)
        self.wait_s = reconnect_s

    def request(self) -> dict[str, Any]:
        """The next connection's request, from the last event taken (``Last-Event-ID``)."""
        self.wait_s = self.reconnect_s
        headers = {**self.headers, "Last-Event-ID": self.cursor} if self.cursor else self.headers
        return {"method": "GET", "url": STREAM_PATH, "headers": headers, "timeout": self.timeout}

    def refused(self, response: httpx.Response) -> None:
        """Take a (read) refusal: wait out its Retry-After when it is worth opening again, else raise it.

        Raises:
            ReviewloopError: The stream was refused for good (401, 403, a bad ``Last-Event-ID``).
        """
        error = ReviewloopError.of(response)
        if error.code not in _STREAM_RETRIED:
            raise error
        self.wait_s = max(error.retry_after or 0, self.reconnect_s)

    def take(self, sse: httpx_sse.ServerSentEvent) -> StreamedEvent | None:
        """A ``review_event`` as a :class:`StreamedEvent` (now the resume point); None for anything else."""
        if sse.event != "review_event" or not sse.data:
            return None
        self.cursor = sse.id or self.cursor
        return StreamedEvent(sse.id, ReviewEvent.model_validate_json(sse.data))


class WebhookVerificationError(standardwebhooks.WebhookVerificationError):
    """A webhook request whose signature or timestamp does not verify: answer it 400 and drop it.

    The Standard Webhooks library's error, so a receiver catching that one catches this one too.
    """


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> None:
    """Check a reviewloop webhook delivery (Standard Webhooks) before trusting its body.

    ``secret`` is the endpoint's ``whsec_...`` secret; ``headers`` the request headers (any case);
    ``body`` the raw request body, exactly as received. The signature is checked by the maintained
    ``standardwebhooks`` library (HMAC-SHA256 over ``"{webhook-id}.{webhook-timestamp}.{body}"``);
    ``webhook-signature`` may carry several ``v1,<base64>`` values (during a secret rotation both secrets
    sign), and one match suffices. The timestamp window is checked here, since the library's is fixed at
    five minutes of the wall clock. Dedupe on ``webhook-id``: delivery is at-least-once.

    Raises:
        WebhookVerificationError: Missing headers, a timestamp more than ``tolerance_s`` away from
            ``now``, or no signature made with ``secret``.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id, stamp, signatures = (
        lowered.get("webhook-id"),
        lowered.get("webhook-timestamp"),
        lowered.get("webhook-signature"),
    )
    if not msg_id or not stamp or not signatures:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        sent_at = int(stamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number of seconds") from None
    if abs((time.time() if now is None else now) - sent_at) > tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too old or too far in the future")
    # The library's own comparison, with the library's signature for the header's timestamp.
    expected = (
        standardwebhooks.Webhook(secret).sign(msg_id, datetime.fromtimestamp(sent_at, UTC), body).encode()
    )
    if not any(hmac.compare_digest(expected, given.encode()) for given in signatures.split(" ")):
        raise WebhookVerificationError("no signature matches this secret")
