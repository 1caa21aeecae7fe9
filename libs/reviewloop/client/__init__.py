"""The typed Python client of the agent contract (spec 000), async and sync, over httpx.

Example::

    async with AsyncReviewloop("http://127.0.0.1:8080", api_key) as rl:
        sent = await rl.send_email(to=["vp@acme.com"], subject="Q3 pilot", body_text="...",
                                   intent={"summary": "Re-engage cold lead at Acme about Q3 pilot"})
        for event in (await rl.wait_for_review_event(timeout_s=30)).events: ...

Every verb is built once as a :class:`Call` (route, arguments, answer shape) and run by either client, so
the two can never disagree. Answers parse into the contract's shapes, ignoring fields this client does not
know yet (the contract grows additively across 0.x). A failure raises :class:`ReviewloopError` carrying the
problem+json: branch on ``error.code``; a gateway that cannot be reached raises its subclass
:class:`ReviewloopConnectionError` (code ``unavailable``), never a raw ``httpx`` error. Every mutation carries
an ``Idempotency-Key`` (a fresh one unless you pass yours), so the client's own retries (``tenacity``:
connection errors, ``503 unavailable``, and a ``429`` or ``503`` with ``Retry-After``, with jittered
exponential backoff or after the ``Retry-After``) can never double a write; a request without a key is
never repeated.

The package, by plane: the verbs in ``messages``, ``reviews``, ``events``, ``rules``, ``categories`` (the
agent plane), ``admin`` (an admin key) and ``budget`` (the review rounds); ``call`` (a verb as data),
``transport`` (the one base and its sync and async I/O), ``problems`` (the errors), ``push`` (the event
stream's resumption and webhook verification), ``clients`` (the two clients).
"""

from reviewloop.client.call import Call
from reviewloop.client.clients import AsyncReviewloop, Reviewloop, Verbs
from reviewloop.client.events import TERMINAL_REASONS
from reviewloop.client.problems import ReviewloopConnectionError, ReviewloopError, is_retryable
from reviewloop.client.push import StreamedEvent, WebhookVerificationError, verify_webhook

__all__ = [
    "TERMINAL_REASONS",
    "AsyncReviewloop",
    "Call",
    "Reviewloop",
    "ReviewloopConnectionError",
    "ReviewloopError",
    "StreamedEvent",
    "Verbs",
    "WebhookVerificationError",
    "is_retryable",
    "verify_webhook",
]
