"""The webhook sender's adapter (issue 19, "Push"): the HTTP side of a delivery, and nothing of the queue.

``send`` POSTs one delivery signed in the Standard Webhooks layout; every send resolves the host and refuses a
forbidden address (the SSRF rule of ``reviewloop.ssrf``), then connects to exactly the address it checked.
``check_target`` is the same rule at registration. ``http_client`` is the sender's client and
``WebhookSettings`` what the sender is configured with. The use cases that fill and drain the delivery
queue (register, rotate, enqueue, deliver) are ``nudge.app.webhooks``; this module stays an adapter: it
imports neither ``nudge.app`` nor ``nudge.store``."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx
from reviewloop import ssrf
from reviewloop.errors import invalid

from nudge.domain import webhooks as rules

RESOLVE_AT_REGISTRATION_S = 2.0


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
