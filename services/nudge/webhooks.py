"""Webhook use cases (issue 19, "Push"): an admin's endpoints per project, the durable delivery queue
filled in each nudge's own transaction, and the sender that drains it.

Delivery is at-least-once and in order per endpoint: the sender claims an endpoint (a lease, so one
replica at a time), POSTs its oldest pending delivery signed in the Standard Webhooks layout, and only
moves on once it is acked (2xx) or failed for good. A refused attempt is retried with exponential backoff
and jitter until ``retry_for`` has passed since the nudge, then marked ``failed`` (listed by
``ListWebhookDeliveries``) and the next one goes. Every send resolves the host and refuses a forbidden
address (the SSRF rule of ``domain.webhooks``), then connects to exactly the address it checked."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx
import orjson
from reviewloop import ssrf
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.review.v1.events_pb2 import HumansNotified
from reviewloop.storage import Database, utcnow
from reviewloop.tenancy import Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge import store
from nudge.domain import webhooks as rules
from nudge.domain.payloads import Broadcast, Incoming
from nudge.store import Endpoint
from nudge.wakeup import SENDER, doorbell

log = logging.getLogger(__name__)

STATUSES = ("pending", "delivered", "failed")
MAX_OVERLAP_S = 7 * 24 * 3600.0
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200
RESOLVE_AT_REGISTRATION_S = 2.0
KEY_CHANGED = (
    "REVIEWLOOP_WEBHOOK_KEY changed since this webhook's secret was issued, so nothing can sign for it: "
    "rotate its secret (and give the receiver the new one)."
)


@dataclass(frozen=True)
class WebhookSettings:
    # Secrets are derived from this key (domain.webhooks); empty: registering a webhook is refused.
    key: bytes = b""
    # Networks an admin allows despite the SSRF rule (REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS).
    allowed_networks: tuple[ssrf.IpNetwork, ...] = ()
    # How long a delivery is retried after its nudge before it is marked failed.
    retry_for: timedelta = timedelta(hours=24)
    backoff_s: float = 1.0
    backoff_cap_s: float = 600.0
    # One attempt, whole: resolving, connecting, sending, the answer's status and the prefix read of it.
    timeout_s: float = 10.0
    # Attempts in flight at once in one process, every endpoint together; an endpoint has one at a time.
    max_in_flight: int = 32
    # How much of an answer not acked is read (for the delivery log) before the connection is closed.
    answer_prefix_bytes: int = 512
    poll_s: float = 1.0
    # An endpoint's claim; its sender stops starting attempts at half of it, so it outlasts one attempt.
    lease_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s < self.lease_s / 2:
            raise ValueError(f"the webhook timeout must be between 0 and {self.lease_s / 2:g} s")
        if self.max_in_flight < 1 or self.answer_prefix_bytes < 0:
            raise ValueError("webhooks need at least one attempt in flight and a prefix size of 0 or more")


@dataclass(frozen=True)
class Registered:
    endpoint: Endpoint
    secret_version: int
    secret: str = field(repr=False)


def _refused(field_name: str, exc: rules.Refused) -> DomainError:
    return invalid(field_name, str(exc))


async def check_target(url: str, allowed: Sequence[ssrf.IpNetwork]) -> None:
    """Refuse a URL this deployment will not send to: a bad URL, a forbidden IP literal, or a host that
    resolves to a forbidden address now (it is checked again at every send, so DNS cannot sneak past).
    The rule is ``reviewloop.ssrf``'s: an IPv6 form that carries an IPv4 address is judged by that."""
    try:
        host, literal = ssrf.check_url(url)
    except ssrf.Refused as exc:
        raise invalid("/url", str(exc)) from None
    if literal is not None:
        why = ssrf.address_refusal(ipaddress.ip_address(literal), allowed)
        if why:
            raise invalid("/url", f"{host} is not an address webhooks may reach: {why}")
        return
    try:
        async with asyncio.timeout(RESOLVE_AT_REGISTRATION_S):
            await ssrf.resolve_checked(host, 443, allowed)
    except ssrf.Refused as exc:
        raise invalid("/url", str(exc)) from None
    except (OSError, TimeoutError, UnicodeError):
        return  # not resolvable yet: every send checks what it resolves to


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


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _nudge_event(incoming: Incoming, nudge_id: str, seq: int, created_at: datetime) -> dict[str, Any]:
    """A stored nudge as its webhook delivery tells it."""
    data: dict[str, Any] = {
        "seq": seq,
        "id": nudge_id,
        "reason": incoming.reason.value,
        "review_id": incoming.review_id,
    }
    if incoming.category_id:
        data["category_id"] = incoming.category_id
    data |= {"payload": incoming.payload, "created_at": _iso(created_at)}
    return {"type": "review_event", "timestamp": _iso(created_at), "data": data}


async def enqueue(
    conn: AsyncConnection, incoming: Incoming, nudge_id: str, seq: int, created_at: datetime
) -> bool:
    """In the nudge's own transaction: one pending delivery per endpoint of its project that wants it.
    Whether any was queued (the three ``enqueue`` functions answer so: the sender is woken only then)."""
    return await _enqueue(
        conn,
        incoming.org_id,
        incoming.project_id,
        incoming.reason.value,
        nudge_id,
        incoming.review_id,
        _nudge_event(incoming, nudge_id, seq, created_at),
        created_at,
    )


async def enqueue_many(conn: AsyncConnection, stored: Sequence[store.Appended]) -> bool:
    """``enqueue`` for a batch of stored nudges: the endpoints of all their projects read in one
    statement, every delivery in one INSERT, in the nudges' order."""
    endpoints = await store.endpoints_of_projects(
        conn, {(nudge.incoming.org_id, nudge.incoming.project_id) for nudge in stored}
    )
    rows = [
        row
        for n in stored
        for row in _deliveries(
            endpoints[n.incoming.org_id, n.incoming.project_id],
            n.incoming.reason.value,
            n.nudge_id,
            n.incoming.review_id,
            _nudge_event(n.incoming, n.nudge_id, n.seq, n.created_at),
            n.created_at,
        )
    ]
    await store.enqueue_deliveries(conn, rows)
    return bool(rows)


async def enqueue_broadcast(conn: AsyncConnection, broadcast: Broadcast, created_at: datetime) -> bool:
    """In the broadcast's own transaction: one pending delivery per endpoint that wants its reason, in its
    project (every project of the org for an org-wide one). The event reads as the drain shows it: ``seq``
    0, no ``review_id``; its id (``webhook-id``) is the broadcast's, the same for every endpoint, so a
    receiver dedupes on it."""
    data: dict[str, Any] = {"seq": 0, "id": broadcast.id, "reason": broadcast.reason.value}
    if broadcast.category_id:
        data["category_id"] = broadcast.category_id
    data |= {"payload": broadcast.payload, "created_at": _iso(created_at)}
    return await _enqueue(
        conn,
        broadcast.org_id,
        broadcast.project_id,
        broadcast.reason.value,
        broadcast.id,
        "",
        {"type": "review_event", "timestamp": _iso(created_at), "data": data},
        created_at,
    )


async def enqueue_humans_notified(conn: AsyncConnection, event: HumansNotified, created_at: datetime) -> bool:
    """In the event's own transaction: one pending delivery per endpoint of its project that asked for
    ``humans_notified``. Its id (``webhook-id``) is the review's humans_notified turn."""
    sent_at = _iso(event.created_at.ToDatetime(UTC)) if event.HasField("created_at") else _iso(created_at)
    data = {
        "id": event.turn_id,
        "review_id": event.review_id,
        "category_id": event.category_id,
        "agent_id": event.agent_id,
        "summary": event.summary,
        "subject": event.subject,
        "to": list(event.to),
        "cc": list(event.cc),
        "bcc": list(event.bcc),
        "created_at": sent_at,
    }
    return await _enqueue(
        conn,
        event.org_id,
        event.project_id,
        rules.HUMANS_NOTIFIED,
        event.turn_id,
        event.review_id,
        {"type": rules.HUMANS_NOTIFIED, "timestamp": _iso(created_at), "data": data},
        created_at,
    )


async def _enqueue(
    conn: AsyncConnection,
    org_id: str,
    project_id: str,
    reason: str,
    event_id: str,
    review_id: str,
    event: dict[str, Any],
    created_at: datetime,
) -> bool:
    endpoints = await store.endpoints_of(conn, org_id, project_id)
    rows = _deliveries(endpoints, reason, event_id, review_id, event, created_at)
    await store.enqueue_deliveries(conn, rows)
    return bool(rows)


def _deliveries(
    endpoints: Sequence[store.Endpoint],
    reason: str,
    event_id: str,
    review_id: str,
    event: dict[str, Any],
    created_at: datetime,
) -> list[dict[str, Any]]:
    """One pending delivery row per endpoint of ``endpoints`` that wants ``reason``."""
    wanted = [e for e in endpoints if rules.wants(e.reasons, reason)]
    if not wanted:
        return []
    body = orjson.dumps(event).decode()
    return [
        {
            "endpoint_id": e.id,
            "event_id": event_id,
            "reason": reason,
            "review_id": review_id,
            "body": body,
            "status": "pending",
            "attempts": 0,
            "next_attempt_at": created_at,
            "created_at": created_at,
        }
        for e in wanted
    ]


@dataclass
class _Answer:
    """What an attempt learned before its deadline: the status, and the start of the answer's body."""

    status: int | None = None
    prefix: bytearray = field(default_factory=bytearray)


async def send(
    client: httpx.AsyncClient,
    settings: WebhookSettings,
    url: str,
    msg_id: str,
    body: bytes,
    signing_secrets: Sequence[str],
) -> tuple[int | None, str | None]:
    """POST one signed delivery: (the receiver's status, or None; why it is not acked, or None).

    The whole attempt (resolving the host, connecting, sending, the answer's status and the prefix of its
    body) has one deadline, ``timeout_s``: a receiver dripping its answer a byte at a time cannot hold the
    attempt longer. A 2xx is an ack and the connection is closed at once, its body unread; of any other
    answer at most ``answer_prefix_bytes`` are read, for the delivery log, then the connection is closed.

    The host is resolved here and every address it resolves to must pass the SSRF rule
    (``reviewloop.ssrf``); the request then goes to the checked address itself (Host and TLS SNI still
    name the host), never to a fresh lookup."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    answer = _Answer()
    try:
        async with asyncio.timeout(settings.timeout_s):
            try:
                addresses = await ssrf.resolve_checked(host, port, settings.allowed_networks)
            except ssrf.Refused as exc:
                return None, f"refused to connect: {exc}"
            except (OSError, UnicodeError) as exc:
                return None, f"cannot resolve {host}: {exc}"
            await _post(client, settings, parts, addresses[0], msg_id, body, signing_secrets, answer)
    except TimeoutError:
        if answer.status is None:
            return None, f"no answer within the {settings.timeout_s:g} s deadline"
        return answer.status, _log_line(answer, f" (cut at the {settings.timeout_s:g} s deadline)")
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
        return answer.status, error if answer.status is None else _log_line(answer, f" ({error})")
    if answer.status is not None and 200 <= answer.status < 300:
        return answer.status, None
    return answer.status, _log_line(answer, "")


async def _post(
    client: httpx.AsyncClient,
    settings: WebhookSettings,
    parts: SplitResult,
    target: ssrf.IpAddress,
    msg_id: str,
    body: bytes,
    signing_secrets: Sequence[str],
    answer: _Answer,
) -> None:
    """The request itself, filling ``answer`` as it learns it (so a deadline keeps what arrived)."""
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    netloc = f"[{target}]:{port}" if target.version == 6 else f"{target}:{port}"
    stamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "user-agent": "reviewloop-webhooks",
        "host": parts.netloc,
        "accept-encoding": "identity",  # the prefix read is the bytes sent, never an inflated stream
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": rules.sign(signing_secrets, msg_id, stamp, body),
    }
    async with client.stream(
        "POST",
        urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")),
        content=body,
        headers=headers,
        # TLS still names (and verifies) the host, not the address connected to.
        extensions={"sni_hostname": host} if parts.scheme == "https" and not _is_literal(host) else {},
    ) as response:
        answer.status = response.status_code
        if 200 <= response.status_code < 300:
            return  # acked: the body is not ours to read
        async for chunk in response.aiter_raw():
            answer.prefix += chunk[: settings.answer_prefix_bytes - len(answer.prefix)]
            if len(answer.prefix) >= settings.answer_prefix_bytes:
                break


def _log_line(answer: _Answer, suffix: str) -> str:
    """The delivery log's line for an answer not acked: the status and the start of what it said."""
    said = " ".join(answer.prefix.decode("utf-8", "replace").split())
    return f"HTTP {answer.status}" + (f": {said}" if said else "") + suffix


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def http_client(settings: WebhookSettings | None = None) -> httpx.AsyncClient:
    """The sender's client: no proxies from the environment (they would bypass the address check), no
    redirects (a 3xx is a failed attempt), as many connections as attempts may be in flight. Each
    attempt's deadline is ``send``'s; the client's own timeouts only back it up."""
    settings = settings or WebhookSettings()
    return httpx.AsyncClient(
        trust_env=False,
        follow_redirects=False,
        timeout=settings.timeout_s,
        limits=httpx.Limits(max_connections=settings.max_in_flight, max_keepalive_connections=0),
    )


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
