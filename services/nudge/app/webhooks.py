"""Webhook use cases (issue 19, "Push"): an admin's endpoints per project, the durable delivery queue
filled in each nudge's own transaction, and the delivery loop that drains it through the sender adapter
(``nudge.webhooks``: the HTTP POST, the SSRF check, the client).

Delivery is at-least-once and in order per endpoint: the loop claims an endpoint (a lease, so one
replica at a time), sends its oldest pending delivery, and only moves on once it is acked (2xx) or failed
for good. A refused attempt is retried with exponential backoff and jitter until ``retry_for`` has passed
since the nudge, then marked ``failed`` (listed by ``ListWebhookDeliveries``) and the next one goes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.storage import Database, utcnow
from reviewloop.tenancy import Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge import store
from nudge.domain import webhooks as rules
from nudge.store import Endpoint
from nudge.wakeup import SENDER, doorbell
from nudge.webhooks import WebhookSettings, check_target, http_client, send

log = logging.getLogger(__name__)

STATUSES = ("pending", "delivered", "failed")
MAX_OVERLAP_S = 7 * 24 * 3600.0
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200
KEY_CHANGED = (
    "REVIEWLOOP_WEBHOOK_KEY changed since this webhook's secret was issued, so nothing can sign for it: "
    "rotate its secret (and give the receiver the new one)."
)


@dataclass(frozen=True)
class Registered:
    endpoint: Endpoint
    secret_version: int
    secret: str = field(repr=False)


def _refused(field_name: str, exc: rules.Refused) -> DomainError:
    return invalid(field_name, str(exc))


def _secret(settings: WebhookSettings, endpoint_id: str, version: int, salt: str) -> str:
    return rules.derive_secret(settings.key, endpoint_id, version, salt)


async def _new_secret(
    conn: AsyncConnection, settings: WebhookSettings, endpoint_id: str, version: int, now: datetime
) -> str:
    salt = secrets.token_urlsafe(24)
    await store.add_secret(conn, endpoint_id, version, salt, rules.key_id(settings.key), now)
    return _secret(settings, endpoint_id, version, salt)


def _configured(settings: WebhookSettings) -> None:
    if not settings.key:
        raise DomainError(Code.NOT_CONFIGURED, "Webhooks need REVIEWLOOP_WEBHOOK_KEY on the nudge service.")


async def register(
    db: Database, settings: WebhookSettings, principal: Principal, url: str, reasons: Sequence[str]
) -> Registered:
    """A new endpoint of the principal's project and its first secret (shown once, never stored).

    Errors: ``bad_request`` for a URL webhooks may not reach or an unknown reason; ``not_configured``
    without a webhook key."""
    _configured(settings)
    try:
        wanted = rules.check_reasons(reasons)
    except rules.Refused as exc:
        raise _refused("/reasons", exc) from None
    await check_target(url, settings.allowed_networks)
    endpoint = Endpoint(new_id("whk"), principal.org_id, principal.project_id, url, wanted, utcnow())
    async with db.transaction() as uow:
        await store.add_endpoint(uow.conn, endpoint)
        secret = await _new_secret(uow.conn, settings, endpoint.id, 1, endpoint.created_at)
    return Registered(endpoint, 1, secret)


async def _owned(conn: AsyncConnection, principal: Principal, endpoint_id: str) -> Endpoint:
    endpoint = await store.endpoint(conn, endpoint_id)
    if endpoint is None or (endpoint.org_id, endpoint.project_id) != (principal.org_id, principal.project_id):
        raise DomainError(Code.NOT_FOUND, f"No webhook {endpoint_id} in project {principal.project_id}.")
    return endpoint


async def list_endpoints(db: Database, principal: Principal) -> list[tuple[Endpoint, int]]:
    """The project's endpoints with their current secret version, oldest first."""
    async with db.one_statement() as conn:
        endpoints = await store.endpoints_of(conn, principal.org_id, principal.project_id)
        versions = await store.secret_versions(conn, [e.id for e in endpoints])
    return [(e, versions.get(e.id, 0)) for e in endpoints]


async def rotate(
    db: Database, settings: WebhookSettings, principal: Principal, endpoint_id: str, overlap_s: float
) -> Registered:
    """A new secret for the endpoint; the current one keeps signing beside it for ``overlap_s`` (any
    older one stops no later than that). Errors: ``bad_request`` (overlap outside 0..7 days),
    ``not_found``."""
    _configured(settings)
    if not 0 <= overlap_s <= MAX_OVERLAP_S:
        raise invalid("/overlap_s", f"between 0 and {MAX_OVERLAP_S:.0f} seconds")
    now = utcnow()
    async with db.transaction() as uow:
        endpoint = await _owned(uow.conn, principal, endpoint_id)
        current = await store.expire_current_secret(uow.conn, endpoint_id, now + timedelta(seconds=overlap_s))
        secret = await _new_secret(uow.conn, settings, endpoint_id, current + 1, now)
    return Registered(endpoint, current + 1, secret)


async def delete(db: Database, principal: Principal, endpoint_id: str) -> None:
    """Remove the endpoint, its secrets and its deliveries. Errors: ``not_found``."""
    async with db.transaction() as uow:
        await _owned(uow.conn, principal, endpoint_id)
        await store.delete_endpoint(uow.conn, endpoint_id)


async def deliveries(
    db: Database, principal: Principal, endpoint_id: str, *, status: str, limit: int
) -> list[Any]:
    """The endpoint's deliveries, newest first. Errors: ``bad_request`` (status, limit), ``not_found``."""
    if status and status not in STATUSES:
        raise invalid("/status", f"one of {', '.join(STATUSES)}")
    if not 0 <= limit <= LIST_LIMIT_MAX:
        raise invalid("/limit", f"between 1 and {LIST_LIMIT_MAX}")
    async with db.one_statement() as conn:
        await _owned(conn, principal, endpoint_id)
        return await store.deliveries_of(conn, endpoint_id, status, limit or LIST_LIMIT_DEFAULT)


async def _deliver_endpoint(
    db: Database, settings: WebhookSettings, client: httpx.AsyncClient, endpoint_id: str
) -> int:
    """Send the endpoint's due deliveries in order while its claim lasts; how many finished.

    One attempt at a time per endpoint (its deliveries go in order), each within ``timeout_s``; the claim
    (``lease_s``) outlasts the loop (``lease_s / 2``) plus one attempt, so no other replica takes it
    while an attempt is in flight."""
    started, now = time.monotonic(), utcnow()
    async with db.transaction() as uow:
        if not await store.claim_endpoint(
            uow.conn, endpoint_id, now, now + timedelta(seconds=settings.lease_s)
        ):
            return 0
    finished = 0
    try:
        while time.monotonic() - started < settings.lease_s / 2:
            now = utcnow()
            async with db.one_statement() as conn:
                endpoint = await store.endpoint(conn, endpoint_id)
                head = await store.head_delivery(conn, endpoint_id)
                live = await store.live_secrets(conn, endpoint_id, now)
            if endpoint is None or head is None or head.next_attempt_at > now:
                break
            current_key = rules.key_id(settings.key)
            signing = [_secret(settings, endpoint_id, v, salt) for v, salt, key in live if key == current_key]
            status, error = (
                await send(client, settings, endpoint.url, head.event_id, head.body.encode(), signing)
                if signing
                else (None, KEY_CHANGED)
            )
            attempts, now = head.attempts + 1, utcnow()
            values: dict[str, Any] = {"attempts": attempts, "last_status": status, "last_error": error}
            if error is None:
                values |= {"status": "delivered", "finished_at": now}
            elif now - head.created_at >= settings.retry_for:
                values |= {"status": "failed", "finished_at": now}
                log.warning(
                    "webhook %s: delivery of %s failed for good: %s", endpoint_id, head.event_id, error
                )
            else:
                wait = rules.backoff_s(attempts, settings.backoff_s, settings.backoff_cap_s)
                values["next_attempt_at"] = now + timedelta(seconds=wait)
            async with db.transaction() as uow:
                await store.record_attempt(uow.conn, head.pos, **values)
            if "status" not in values:
                break  # the head waits for its retry; later deliveries wait behind it (order)
            finished += 1
    finally:
        async with db.transaction() as uow:
            await store.claim_endpoint(uow.conn, endpoint_id, utcnow(), None)
    return finished


async def deliver_due(db: Database, settings: WebhookSettings, client: httpx.AsyncClient) -> int:
    """One round: every endpoint with a due delivery (at most ``max_in_flight``, the longest waiting
    first), concurrently, awaited together; how many deliveries finished. ``deliver_forever`` does not
    wait for a round: it starts each endpoint on its own."""
    async with db.one_statement() as conn:
        due = await store.endpoints_due(conn, utcnow(), settings.max_in_flight)
    done = await asyncio.gather(*(_deliver_endpoint(db, settings, client, e) for e in due))
    return sum(done)


class _Sender:
    """The endpoints this process is delivering, each on its own task: a slow or failing endpoint delays
    only itself, at most ``max_in_flight`` at once."""

    def __init__(
        self, db: Database, settings: WebhookSettings, client: httpx.AsyncClient, rung: asyncio.Event
    ):
        self.db, self.settings, self.client, self.rung = db, settings, client, rung
        self.running: dict[str, asyncio.Task[int]] = {}

    async def start_due(self) -> None:
        """Start a task for each endpoint due now that is not running here, while slots are free."""
        free = self.settings.max_in_flight - len(self.running)
        if free <= 0:
            return
        async with self.db.one_statement() as conn:
            # The ones running here may show up (a claim is taken inside the task): ask for enough more.
            due = await store.endpoints_due(conn, utcnow(), free + len(self.running))
        for endpoint_id in due:
            if endpoint_id in self.running or len(self.running) >= self.settings.max_in_flight:
                continue
            task = asyncio.create_task(
                _deliver_endpoint(self.db, self.settings, self.client, endpoint_id),
                name=f"webhook {endpoint_id}",
            )
            self.running[endpoint_id] = task
            task.add_done_callback(functools.partial(self._finished, endpoint_id))

    def _finished(self, endpoint_id: str, task: asyncio.Task[int]) -> None:
        self.running.pop(endpoint_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("webhook %s: delivery failed", endpoint_id, exc_info=task.exception())
        self.rung.set()  # a slot is free, and the endpoint may have more due

    async def stop(self) -> None:
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def deliver_forever(db: Database, settings: WebhookSettings) -> None:
    """The sender: starts each due endpoint on its own task whenever this replica queued a delivery (its
    doorbell), an endpoint's task ended, or every ``poll_s`` (what other replicas queued, a retry
    coming due). It never waits for an endpoint: a slow receiver holds only its own deliveries."""
    async with http_client(settings) as client:
        with doorbell(db).waiter(SENDER) as rung:
            sender = _Sender(db, settings, client, rung)
            try:
                while True:
                    rung.clear()
                    try:
                        await sender.start_due()
                    except Exception:
                        log.exception("webhook delivery round failed")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(rung.wait(), settings.poll_s)
            finally:
                await sender.stop()


# The sender's settings and client are the adapter's; re-exported as part of this plane.
__all__ = [
    "KEY_CHANGED",
    "LIST_LIMIT_DEFAULT",
    "LIST_LIMIT_MAX",
    "MAX_OVERLAP_S",
    "STATUSES",
    "Registered",
    "WebhookSettings",
    "delete",
    "deliver_due",
    "deliver_forever",
    "deliveries",
    "http_client",
    "list_endpoints",
    "register",
    "rotate",
]
