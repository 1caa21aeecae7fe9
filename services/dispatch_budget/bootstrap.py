"""The composition root: the process's settings (``DispatchBudgetEnvironment``, read once at boot) wired
into the service.

``bootstrap(db, settings_from(read))`` builds the ``Env`` the servicer and its use cases run with;
``client_settings()`` is what the ``reviewloop review ...`` commands read."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Self

from pydantic import PrivateAttr
from reviewloop import ssrf
from reviewloop.config import ServiceSettings
from reviewloop.settings import CommaList, Text, variable
from reviewloop.settings import Settings as ProcessSettings

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


class DispatchBudgetEnvironment(ServiceSettings):
    """What the dispatch_budget process reads: spec 001's ``review.*`` settings (the deployment default of
    every project's gate configuration, which an admin overrides per project), the review sessions'
    lease and timeout sweep, and the shared-pool auto-send budgets."""

    title = "dispatch_budget"

    review_enabled: bool = variable(
        REVIEW_PREFIX + "ENABLED", True, "Review runs gated at all (spec 001 `enabled`)"
    )
    review_turn_interval: int = variable(REVIEW_PREFIX + "TURN_INTERVAL", 10, "Turns between reviews", ge=0)
    review_tool_call_threshold: int = variable(
        REVIEW_PREFIX + "TOOL_CALL_THRESHOLD", 15, "Tool calls that make a review due", ge=0
    )
    review_cooldown_minutes: float = variable(
        REVIEW_PREFIX + "COOLDOWN_MINUTES", 20.0, "The least time between two reviews of a session", ge=0
    )
    review_max_per_session: int = variable(
        REVIEW_PREFIX + "MAX_PER_SESSION", 8, "Reviews a session may run", ge=0
    )
    review_gate: GateKind = variable(
        REVIEW_PREFIX + "GATE",
        GateKind.COUNTERS,
        "the review-run gate of spec 001: `counters` or `classifier` (with `REVIEWLOOP_REVIEW_GATE_URL` and the key named by `REVIEWLOOP_REVIEW_GATE_API_KEY_ENV`); the deployment default of every `REVIEWLOOP_REVIEW_*` gate setting, which an admin overrides per project with `PUT /v1/review-rounds/gate-config` (never the endpoint's URL or key: a project picks an endpoint by name, `classifier_endpoint`)",
    )
    review_confident_no: float = variable(
        REVIEW_PREFIX + "CONFIDENT_NO", 0.75, "The classifier's confidence that skips a review", ge=0, le=1
    )
    review_gate_cooldown_minutes: float = variable(
        REVIEW_PREFIX + "GATE_COOLDOWN_MINUTES", 5.0, "The classifier's cooldown after it said no", ge=0
    )
    review_gate_timeout_ms: float = variable(
        REVIEW_PREFIX + "GATE_TIMEOUT_MS", 2000.0, "One classifier call's deadline", gt=0
    )
    review_gate_url: str = variable(REVIEW_PREFIX + "GATE_URL", "", "The default classifier endpoint")
    review_gate_endpoints: str = variable(
        REVIEW_PREFIX + "GATE_ENDPOINTS",
        "",
        "other classifier endpoints a project may pick by name, `name=url` comma-separated (`default` is `REVIEWLOOP_REVIEW_GATE_URL`); each is held to the webhooks' SSRF rule at boot and on the addresses resolved at every call, and the deployment's classifier key goes only to these",
        unset="none",
    )
    review_gate_api_key_env: str = variable(
        REVIEW_PREFIX + "GATE_API_KEY_ENV",
        "",
        "The variable holding the classifier's key (never the key itself)",
    )
    review_gate_allowed_networks: CommaList = variable(
        REVIEW_PREFIX + "GATE_ALLOWED_NETWORKS",
        (),
        "CIDRs the classifier endpoints may be in despite the SSRF rule (an on-premises classifier), comma-separated",
        unset="none",
    )
    review_timeout_minutes: float = variable(
        REVIEW_PREFIX + "TIMEOUT_MINUTES",
        5.0,
        "spec 001 `timeoutMinutes`: a review in flight longer is ended as timed out (its admitted attempt settles no-verdict) so the session's next due review can run",
        gt=0,
    )
    review_lease_seconds: float = variable(
        REVIEW_PREFIX + "LEASE_SECONDS",
        DEFAULT_LEASE.total_seconds(),
        "how long a busy WARM/COLD review session binding is held between heartbeats (`POST .../sessions/{id}/heartbeat`); a lapsed lease frees the lineage",
        gt=0,
    )
    review_sweep_seconds: float = variable(
        REVIEW_PREFIX + "SWEEP_SECONDS",
        30.0,
        "how often each dispatch_budget replica sweeps for reviews in flight past `timeoutMinutes` and ends them (their admitted attempts settle no-verdict `timed_out`) without waiting for the session's next call",
        gt=0,
    )
    auto_send_pool_budget: str = variable(
        "REVIEWLOOP_AUTO_SEND_POOL_BUDGET",
        "",
        "Auto-sends per sending domain per UTC day (unset: the default)",
        unset="`2000`",
    )
    auto_send_pool_budgets: str = variable(
        "REVIEWLOOP_AUTO_SEND_POOL_BUDGETS", "", "Per-domain budgets, domain=N comma-separated"
    )
    # The classifier's key, from the variable ``..._GATE_API_KEY_ENV`` names (read with the rest, in
    # ``from_env``), so the key itself never sits in the service's own configuration.
    _gate_api_key: str = PrivateAttr("")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """Read the settings from ``env``, and the classifier's key from the variable they name."""
        read = super().from_env(env)
        if read.review_gate_api_key_env:
            read._gate_api_key = env.get(read.review_gate_api_key_env, "")
        return read


def config_from_env(env: Mapping[str, str]) -> GateConfig:
    """The gate's deployment default, ``REVIEWLOOP_REVIEW_*``, read from ``env`` (tests)."""
    return gate_config(DispatchBudgetEnvironment.from_env(env))


def gate_config(read: DispatchBudgetEnvironment) -> GateConfig:
    """Spec 001's ``review.*`` settings: every project's gate configuration unless an admin sets its own."""
    return GateConfig(
        enabled=read.review_enabled,
        turn_interval=read.review_turn_interval,
        tool_call_threshold=read.review_tool_call_threshold,
        cooldown=timedelta(minutes=read.review_cooldown_minutes),
        max_per_session=read.review_max_per_session,
        gate=read.review_gate,
        confident_no=read.review_confident_no,
        gate_cooldown=timedelta(minutes=read.review_gate_cooldown_minutes),
        timeout_s=read.review_gate_timeout_ms / 1000,
        classifier_url=read.review_gate_url,
        classifier_endpoints=parse_endpoints(read.review_gate_endpoints),
        api_key=read._gate_api_key,
        review_timeout=timedelta(minutes=read.review_timeout_minutes),
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


def settings_from(read: DispatchBudgetEnvironment) -> Settings:
    """The service's settings."""
    return Settings(
        gate=gate_config(read),
        lease=timedelta(seconds=read.review_lease_seconds),
        sweep_interval_s=read.review_sweep_seconds,
        classifier_allowed_networks=ssrf.parse_networks(read.review_gate_allowed_networks),
        pool_budgets=parse_budgets(read.auto_send_pool_budget, read.auto_send_pool_budgets),
    )


def bootstrap(db: Database, settings: Settings) -> Env:
    """The service's wiring."""
    from dispatch_budget.classifier import ClassifierGate

    return Env(
        settings=settings,
        db=db,
        gate=ClassifierGate(settings.gate, allowed_networks=settings.classifier_allowed_networks),
    )


class ReviewCliEnvironment(ProcessSettings):
    """What the ``reviewloop review ...`` commands read."""

    title = "The reviewloop review commands"

    gateway: Text = variable(
        "REVIEWLOOP_GATEWAY", None, "The gateway the commands talk to (http://host:port)"
    )
    api_key: str = variable("REVIEWLOOP_API_KEY", "", "The key they present")


@dataclass(frozen=True)
class ClientSettings:
    """What the CLI commands read: the gateway to talk to (None when unset) and the API key."""

    gateway: str | None
    api_key: str


def client_settings(env: Mapping[str, str] | None = None) -> ClientSettings:
    """The commands' settings (:class:`ReviewCliEnvironment`)."""
    read = ReviewCliEnvironment.from_env(os.environ if env is None else env)
    return ClientSettings(gateway=read.gateway, api_key=read.api_key)
