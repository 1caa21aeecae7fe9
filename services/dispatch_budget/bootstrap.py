"""The composition root: the one place that reads the environment and wires the service.

``bootstrap(db)`` builds the ``Env`` the servicer and its use cases run with; ``client_settings()``
is what the ``reviewloop review ...`` commands read."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from reviewloop import ssrf

from dispatch_budget.domain.gate import DEFAULT_ENDPOINT, GateConfig, GateKind
from dispatch_budget.domain.lineage import DEFAULT_LEASE
from dispatch_budget.domain.pool import PoolBudgets, parse_budgets

if TYPE_CHECKING:  # the CLI reads client_settings() without loading the store or the HTTP client
    from reviewloop.storage import Database

    from dispatch_budget.classifier import ClassifierGate

REVIEW_PREFIX = "REVIEWLOOP_REVIEW_"


@dataclass(frozen=True)
class Settings:
    """What the service reads from its environment: spec 001's ``review.*`` settings (the deployment
    default of every project's gate configuration), how long a busy review session's lease runs
    between heartbeats, and how often the timeout sweep looks for reviews in flight past
    ``timeoutMinutes``."""

    gate: GateConfig
    lease: timedelta = DEFAULT_LEASE
    sweep_interval_s: float = 30.0
    # Networks the classifier endpoints may be in despite the SSRF rule (an on-premises classifier).
    classifier_allowed_networks: tuple[ssrf.IpNetwork, ...] = ()
    # The shared-pool auto-send governor's budgets per sending domain per UTC day
    # (REVIEWLOOP_AUTO_SEND_POOL_BUDGET, REVIEWLOOP_AUTO_SEND_POOL_BUDGETS=domain=N,...).
    pool_budgets: PoolBudgets = field(default_factory=PoolBudgets)


@dataclass(frozen=True)
class Env:
    """What the use cases run with: the settings, the store, and the classifier gate (which holds
    the process-wide circuit breaker)."""

    settings: Settings
    db: Database
    gate: ClassifierGate


def config_from_env(env: Mapping[str, str] | None = None) -> GateConfig:
    """``REVIEWLOOP_REVIEW_*`` settings; the API key is read from the variable ``..._GATE_API_KEY_ENV``
    names, so the key itself never sits in the service's own configuration."""
    env = os.environ if env is None else env

    def num(name: str, default: float) -> float:
        return float(env.get(REVIEW_PREFIX + name, default))

    key_env = env.get(REVIEW_PREFIX + "GATE_API_KEY_ENV", "")
    return GateConfig(
        enabled=env.get(REVIEW_PREFIX + "ENABLED", "true").lower() not in ("0", "false", "off"),
        turn_interval=int(num("TURN_INTERVAL", 10)),
        tool_call_threshold=int(num("TOOL_CALL_THRESHOLD", 15)),
        cooldown=timedelta(minutes=num("COOLDOWN_MINUTES", 20)),
        max_per_session=int(num("MAX_PER_SESSION", 8)),
        gate=GateKind(env.get(REVIEW_PREFIX + "GATE", "counters")),
        confident_no=num("CONFIDENT_NO", 0.75),
        gate_cooldown=timedelta(minutes=num("GATE_COOLDOWN_MINUTES", 5)),
        timeout_s=num("GATE_TIMEOUT_MS", 2000) / 1000,
        classifier_url=env.get(REVIEW_PREFIX + "GATE_URL", ""),
        classifier_endpoints=parse_endpoints(env.get(REVIEW_PREFIX + "GATE_ENDPOINTS", "")),
        api_key=env.get(key_env, "") if key_env else "",
        review_timeout=timedelta(minutes=num("TIMEOUT_MINUTES", 5)),
    )


def parse_endpoints(text: str) -> tuple[tuple[str, str], ...]:
    """``REVIEWLOOP_REVIEW_GATE_ENDPOINTS``: the operator's other classifier endpoints a project may
    pick by name, ``name=url`` separated by commas or whitespace (``default`` is GATE_URL's)."""
    endpoints: list[tuple[str, str]] = []
    for item in text.replace(",", " ").split():
        name, sep, url = item.partition("=")
        if not sep or not name or not url or name == DEFAULT_ENDPOINT:
            raise ValueError(
                f"{REVIEW_PREFIX}GATE_ENDPOINTS: {item!r} is not name=url (and 'default' is GATE_URL's)"
            )
        endpoints.append((name, url))
    return tuple(endpoints)


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    networks = env.get(REVIEW_PREFIX + "GATE_ALLOWED_NETWORKS", "").replace(",", " ").split()
    lease_s = float(env.get(REVIEW_PREFIX + "LEASE_SECONDS", DEFAULT_LEASE.total_seconds()))
    sweep_s = float(env.get(REVIEW_PREFIX + "SWEEP_SECONDS", Settings.sweep_interval_s))
    return Settings(
        gate=config_from_env(env),
        lease=timedelta(seconds=lease_s),
        sweep_interval_s=sweep_s,
        classifier_allowed_networks=ssrf.parse_networks(networks),
        pool_budgets=parse_budgets(
            env.get("REVIEWLOOP_AUTO_SEND_POOL_BUDGET", ""), env.get("REVIEWLOOP_AUTO_SEND_POOL_BUDGETS", "")
        ),
    )


def bootstrap(db: Database, settings: Settings | None = None) -> Env:
    """The service's wiring; the defaults are production's (settings from the environment)."""
    from dispatch_budget.classifier import ClassifierGate

    settings = settings or settings_from_env()
    return Env(
        settings=settings,
        db=db,
        gate=ClassifierGate(settings.gate, allowed_networks=settings.classifier_allowed_networks),
    )


@dataclass(frozen=True)
class ClientSettings:
    """What the CLI commands read: the gateway to talk to (None when unset) and the API key."""

    gateway: str | None
    api_key: str


def client_settings(env: Mapping[str, str] | None = None) -> ClientSettings:
    env = os.environ if env is None else env
    return ClientSettings(gateway=env.get("REVIEWLOOP_GATEWAY"), api_key=env.get("REVIEWLOOP_API_KEY", ""))
