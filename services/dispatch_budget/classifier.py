"""The classifier gate's HTTP side: one three-way question per due review, with every guard of spec
001 (timeout per attempt, one retry on 429/5xx, fallback on anything else, the circuit breaker,
a missing key keeping the gate on counters after one warning)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx

from dispatch_budget.domain.gate import (
    CHOICES,
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


class ClassifierGate:
    """Holds the process-wide breaker. ``config.gate`` is effective only with a URL and a key."""

    def __init__(self, config: GateConfig, client: httpx.AsyncClient | None = None) -> None:
        if config.gate is GateKind.CLASSIFIER and not (config.api_key and config.classifier_url):
            log.warning("review gate: classifier has no API key or URL; the gate stays on counters")
            config = replace(config, gate=GateKind.COUNTERS)
        self.config = config
        self.breaker = Breaker(config.breaker_threshold)
        self._client = client

    @property
    def active(self) -> bool:
        return self.active_for(self.config)

    @staticmethod
    def active_for(config: GateConfig) -> bool:
        """A project's classifier gate runs only with an endpoint and the deployment's key."""
        return config.gate is GateKind.CLASSIFIER and bool(config.api_key and config.classifier_url)

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

    async def _ask(self, digest: dict[str, Any], config: GateConfig) -> tuple[Decision, bool]:
        body = {"question": QUESTION, "choices": list(CHOICES), "digest": digest}
        headers = {"Authorization": f"Bearer {config.api_key}"}
        client = self._client or httpx.AsyncClient()
        try:
            for attempt in range(2):  # 429/5xx are retried once
                try:
                    response = await client.post(
                        config.classifier_url, json=body, headers=headers, timeout=config.timeout_s
                    )
                except httpx.TimeoutException:
                    return fallback("timeout"), True
                except httpx.HTTPError as exc:
                    return fallback(f"network error ({exc.__class__.__name__})"), True
                if response.status_code == 429 or response.status_code >= 500:
                    if attempt == 0:
                        continue
                    return fallback(f"http {response.status_code} after retry"), True
                if response.status_code != 200:
                    return fallback(f"http {response.status_code}"), True
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
