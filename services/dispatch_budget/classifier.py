"""The classifier gate's HTTP side: one three-way question per due review, with every guard of spec
001 (timeout per attempt, one retry on 429/5xx, fallback on anything else, the circuit breaker,
a missing key keeping the gate on counters after one warning)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx
from reviewloop import ssrf

from dispatch_budget.domain.gate import (
    CHOICES,
    DEFAULT_ENDPOINT,
    QUESTION,
    Breaker,
    Decision,
    GateConfig,
    GateKind,
    decision_from_answer,
    fallback,
    with_overrides,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GateOutcome:
    decision: Decision
    latency_ms: int


UNAVAILABLE = "classifier unavailable"


class ClassifierGate:
    """Holds the process-wide breaker. ``config.gate`` is effective only with an endpoint and a key.

    The endpoints and the key are the deployment's (issue 35): every URL is the operator's, held to
    the SSRF rule webhooks use (``reviewloop.ssrf``) once at boot and again on the addresses resolved
    at every call, and the request connects to the checked address itself (no proxies from the
    environment, no redirects), so the deployment's key never leaves for an address the rule refuses.
    A project only picks an endpoint by name. Why a call failed goes to this service's log; the
    project's decision log says only ``classifier unavailable`` (no status, no network error, no
    timeout), so it cannot serve as a port scanner."""

    def __init__(
        self,
        config: GateConfig,
        client: httpx.AsyncClient | None = None,
        allowed_networks: Sequence[ssrf.IpNetwork] = (),
    ) -> None:
        self.allowed_networks = tuple(allowed_networks)
        config = replace(
            config,
            classifier_url=self._checked(DEFAULT_ENDPOINT, config.classifier_url),
            classifier_endpoints=tuple(
                (name, url) for name, url in config.classifier_endpoints if self._checked(name, url)
            ),
        )
        if config.gate is GateKind.CLASSIFIER and not (config.api_key and config.classifier_url):
            log.warning("review gate: classifier has no API key or URL; the gate stays on counters")
            config = replace(config, gate=GateKind.COUNTERS)
        self.config = config
        self.breaker = Breaker(config.breaker_threshold)
        self._client = client

    def _checked(self, name: str, url: str) -> str:
        """``url`` when the SSRF rule allows it as written (a literal address is judged now, a name at
        every call); "" (with a warning) when it does not."""
        if not url:
            return ""
        try:
            _, literal = ssrf.check_url(url)
        except ssrf.Refused as exc:
            log.warning("review gate: classifier endpoint %s refused: %s", name, exc)
            return ""
        if literal is not None:
            why = ssrf.address_refusal(ipaddress.ip_address(literal), self.allowed_networks)
            if why:
                log.warning("review gate: classifier endpoint %s refused: %s", name, why)
                return ""
        return url

    @property
    def active(self) -> bool:
        return self.active_for(self.config)

    @staticmethod
    def active_for(config: GateConfig) -> bool:
        """A project's classifier gate runs only with an operator's endpoint and the deployment's key."""
        return config.gate is GateKind.CLASSIFIER and bool(config.api_key and config.endpoint_url)

    def for_project(self, overrides: Mapping[str, Any]) -> GateConfig:
        """The project's effective configuration: an admin's overrides over the environment."""
        return with_overrides(self.config, overrides)

    async def decide(self, digest: dict[str, Any], config: GateConfig | None = None) -> GateOutcome:
        """One gate call: the decision, or a fallback to review that says why."""
        config = config or self.config
        started = time.monotonic()
        if not self.active_for(config):
            return GateOutcome(Decision("review", GateKind.COUNTERS.value, "counters due"), 0)
        if self.breaker.open:
            return GateOutcome(fallback("circuit open"), 0)
        decision, failed = await self._ask(digest, config)
        if failed:
            self.breaker.failure()
        else:
            self.breaker.success()
        return GateOutcome(decision, int((time.monotonic() - started) * 1000))

    def _unavailable(self, config: GateConfig, why: str) -> tuple[Decision, bool]:
        log.warning("review gate: classifier endpoint %s: %s", config.classifier_endpoint, why)
        return fallback(UNAVAILABLE), True

    async def _ask(self, digest: dict[str, Any], config: GateConfig) -> tuple[Decision, bool]:
        body = {"question": QUESTION, "choices": list(CHOICES), "digest": digest}
        parts = urlsplit(config.endpoint_url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        client = self._client or httpx.AsyncClient(trust_env=False, follow_redirects=False)
        try:
            for attempt in range(2):  # 429/5xx are retried once
                try:
                    async with asyncio.timeout(config.timeout_s):
                        addresses = await ssrf.resolve_checked(host, port, self.allowed_networks)
                        response = await _post(client, parts, addresses[0], body, config.api_key)
                except TimeoutError:
                    return self._unavailable(config, "timeout")
                except ssrf.Refused as exc:
                    return self._unavailable(config, f"refused: {exc}")
                except (OSError, httpx.HTTPError) as exc:
                    return self._unavailable(config, f"network error ({exc.__class__.__name__}: {exc})")
                if response.status_code == 429 or response.status_code >= 500:
                    if attempt == 0:
                        continue
                    return self._unavailable(config, f"http {response.status_code} after retry")
                if response.status_code != 200:
                    return self._unavailable(config, f"http {response.status_code}")
                try:
                    answer = response.json()
                except ValueError:
                    return fallback("malformed answer"), True
                decision = decision_from_answer(answer, config.confident_no)
                if decision is None:
                    return fallback("malformed answer"), True
                return decision, False
            raise AssertionError("unreachable")
        finally:
            if self._client is None:
                await client.aclose()


async def _post(
    client: httpx.AsyncClient, parts: SplitResult, target: ssrf.IpAddress, body: Any, api_key: str
) -> httpx.Response:
    """POST to the address the SSRF rule just checked, never to a fresh lookup (DNS rebinding); Host
    and TLS SNI still name the endpoint's host."""
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    netloc = f"[{target}]:{port}" if target.version == 6 else f"{target}:{port}"
    literal = host.strip("[]") == str(target)
    return await client.post(
        urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")),
        json=body,
        headers={"Authorization": f"Bearer {api_key}", "Host": parts.netloc},
        extensions={"sni_hostname": host} if parts.scheme == "https" and not literal else {},
        follow_redirects=False,
    )
