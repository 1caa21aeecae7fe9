"""Gateway settings, read once from the environment (``GatewayEnvironment``)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reviewloop.config import ServiceSettings
from reviewloop.files import generated_secret
from reviewloop.settings import CommaList, Text, variable
from reviewloop.storage import fastpaths
from reviewloop.storage.engine import DEFAULT_POOL_SIZE
from reviewloop.telemetry import TelemetrySettings
from reviewloop.trust import Trust

GATEWAY = "gateway"
# The services the gateway fronts (its peers).
BACKENDS = ("review_state", "rules", "diff", "nudge", "dispatch_budget")

ADMIN_TOKEN_ENV = "REVIEWLOOP_ADMIN_TOKEN"
DEFAULT_MAX_BODY = 4 * 1024 * 1024


def admin_token_path(data: Path) -> Path:
    return data / "admin-token"


def admin_token_source(token: str | None, data: Path) -> str:
    """Where the bootstrap admin token comes from, for ``reviewloop up`` to print."""
    return f"${ADMIN_TOKEN_ENV}" if token else str(admin_token_path(data))


def load_admin_token(token: str | None, data: Path) -> str:
    """``REVIEWLOOP_ADMIN_TOKEN``, or the one in ``.data/admin-token``, generated (mode 0600) when absent."""
    if token:
        return token
    return generated_secret(admin_token_path(data), lambda: "rladm_" + secrets.token_urlsafe(32))


# The agent plane's limits, per key and per project, per verb class (gateway.ratelimits.LIMITED):
# ``limits``' notation ("120/minute", or several: "10/second;120/minute"), or "off".
DEFAULT_RATE_LIMITS = {
    "submit_per_key": "120/minute",
    "submit_per_project": "600/minute",
    "wait_per_key": "120/minute",
    "wait_per_project": "1200/minute",
    "ack_per_key": "300/minute",
    "ack_per_project": "3000/minute",
    "rule_write_per_key": "60/minute",
    "rule_write_per_project": "300/minute",
}


# Each limit's setting, spelled out so an operator finds it by search (docs/configuration.md, docs/operations.md).
RATE_LIMIT_SETTINGS = {
    "submit_per_key": "REVIEWLOOP_RATE_LIMIT_SUBMIT_PER_KEY",
    "submit_per_project": "REVIEWLOOP_RATE_LIMIT_SUBMIT_PER_PROJECT",
    "wait_per_key": "REVIEWLOOP_RATE_LIMIT_WAIT_PER_KEY",
    "wait_per_project": "REVIEWLOOP_RATE_LIMIT_WAIT_PER_PROJECT",
    "ack_per_key": "REVIEWLOOP_RATE_LIMIT_ACK_PER_KEY",
    "ack_per_project": "REVIEWLOOP_RATE_LIMIT_ACK_PER_PROJECT",
    "rule_write_per_key": "REVIEWLOOP_RATE_LIMIT_RULE_WRITE_PER_KEY",
    "rule_write_per_project": "REVIEWLOOP_RATE_LIMIT_RULE_WRITE_PER_PROJECT",
}


def rate_limit_env(name: str) -> str:
    """The setting of one limit: ``submit_per_key`` -> ``REVIEWLOOP_RATE_LIMIT_SUBMIT_PER_KEY``."""
    return RATE_LIMIT_SETTINGS[name]


LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")


def _limit(name: str, what: str) -> Any:
    return variable(RATE_LIMIT_SETTINGS[name], DEFAULT_RATE_LIMITS[name], f"{what}: limits' notation, or off")


class GatewayEnvironment(ServiceSettings):
    """What the gateway process reads, besides its placement and its peers' (``REVIEWLOOP_<PART>_ADDR``)."""

    title = "Gateway"

    admin_token: Text = variable(
        ADMIN_TOKEN_ENV, None, "the bootstrap admin token", unset="generated into `.data/admin-token`"
    )
    max_body_bytes: int = variable(
        "REVIEWLOOP_MAX_BODY_BYTES",
        DEFAULT_MAX_BODY,
        "the gateway refuses larger request bodies with `413`",
        gt=0,
    )
    backend_timeout_s: float = variable(
        "REVIEWLOOP_BACKEND_TIMEOUT_S", 10.0, "How long a call to a service may take", gt=0
    )
    key_cache_s: float = variable(
        "REVIEWLOOP_GATEWAY_KEY_CACHE_S",
        1.0,
        "how long the gateway trusts a key it authenticated without reading its store; revoking through a gateway takes effect there at once, on other gateway replicas within this window (`0` = read every time)",
        ge=0,
    )
    idempotency_lease_s: float = variable(
        "REVIEWLOOP_GATEWAY_IDEMPOTENCY_LEASE_S",
        30.0,
        "a mutation the gateway dedupes itself (`x-idempotency: gateway`, e.g. the console's) holds its `Idempotency-Key` while it runs; a gateway that dies mid-request leaves the key held this long at most, then a retry with the same key runs it (once) instead of `409 still running`",
        gt=0,
    )
    sse_heartbeat_s: float = variable(
        "REVIEWLOOP_SSE_HEARTBEAT_S",
        15.0,
        "how often an idle `/v1/review-events/stream` sends a heartbeat comment",
        gt=0,
    )
    streams_per_key: int = variable(
        "REVIEWLOOP_STREAMS_PER_KEY", 5, "Open event streams per key on one gateway (0: no cap)", ge=0
    )
    streams_per_project: int = variable(
        "REVIEWLOOP_STREAMS_PER_PROJECT",
        50,
        "Open event streams per project on one gateway (0: no cap)",
        ge=0,
    )
    mcp_allowed_hosts: CommaList = variable(
        "REVIEWLOOP_MCP_ALLOWED_HOSTS",
        LOOPBACK_HOSTS,
        "the `Host` names `/mcp` answers, comma-separated (`host:*` for any port); other hosts get `421` and foreign `Origin`s `403` (DNS-rebinding protection); `*` turns the check off",
    )
    rate_limit_submit_per_key: str = _limit("submit_per_key", "Sends, per key")
    rate_limit_submit_per_project: str = _limit("submit_per_project", "Sends, per project")
    rate_limit_wait_per_key: str = _limit("wait_per_key", "Event reads and waits, per key")
    rate_limit_wait_per_project: str = _limit("wait_per_project", "Event reads and waits, per project")
    rate_limit_ack_per_key: str = _limit("ack_per_key", "Acks, per key")
    rate_limit_ack_per_project: str = _limit("ack_per_project", "Acks, per project")
    rate_limit_rule_write_per_key: str = _limit("rule_write_per_key", "Rule writes, per key")
    rate_limit_rule_write_per_project: str = _limit("rule_write_per_project", "Rule writes, per project")


@dataclass(frozen=True)
class GatewaySettings:
    db_url: str
    host: str
    port: int
    data_dir: Path
    peers: Mapping[str, str]
    admin_token: str
    max_body_bytes: int
    backend_timeout_s: float
    otlp_endpoint: str | None
    # How long an authenticated key is trusted without a store read; see auth.KeyCache.
    key_cache_s: float = 1.0
    # Host headers /mcp answers (DNS-rebinding protection); "host:*" allows any port, "*" turns it off.
    mcp_allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    # How long an Idempotency-Key claim outlives a gateway that died holding it; see store.claim.
    idempotency_lease_s: float = 30.0
    # How often an idle review-event stream sends a comment, so proxies do not close it.
    sse_heartbeat_s: float = 15.0
    db_pool_size: int = DEFAULT_POOL_SIZE
    fast_paths: frozenset[str] = (
        fastpaths.ALL
    )  # the storage fast paths the store takes (REVIEWLOOP_SLOW_PATHS)
    # Where /metrics is served apart from the public port (REVIEWLOOP_GATEWAY_METRICS_ADDR; the
    # manifests set it): the public port then answers it 404. Unset: /metrics on the public port.
    metrics_listen: str | None = None
    # Open review-event streams on this gateway, per key and per project (0: no cap); see feeds.Feeds.
    streams_per_key: int = 5
    streams_per_project: int = 50
    # The agent plane's rate limits (``limits`` notation, "off" for none); see gateway.ratelimits.
    rate_limits: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_RATE_LIMITS))
    # How the gateway's calls to the services authenticate (none on the loopback default).
    trust: Trust = field(default_factory=Trust)
    # How its traces are sampled (OTEL_TRACES_SAMPLER, _ARG), as the environment read them.
    sampling: TelemetrySettings = field(default_factory=lambda: TelemetrySettings.from_env({}))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GatewaySettings:
        """Read the gateway's settings (``GatewayEnvironment``) and placement, once.

        Raises:
            ConfigError: A setting does not parse, or a part's address is unset.
        """
        read = GatewayEnvironment.placed(GATEWAY, *BACKENDS).from_env(env)
        host, _, port = read.address(GATEWAY).rpartition(":")
        return cls(
            db_url=read.db_url(GATEWAY),
            host=host,
            port=int(port),
            data_dir=read.data_dir,
            peers={name: read.address(name) for name in BACKENDS},
            admin_token=load_admin_token(read.admin_token, read.data_dir),
            max_body_bytes=read.max_body_bytes,
            backend_timeout_s=read.backend_timeout_s,
            otlp_endpoint=read.otlp_endpoint,
            key_cache_s=read.key_cache_s,
            idempotency_lease_s=read.idempotency_lease_s,
            sse_heartbeat_s=read.sse_heartbeat_s,
            db_pool_size=read.db_pool_size,
            fast_paths=read.fast_paths,
            metrics_listen=read.metrics_address(GATEWAY),
            streams_per_key=read.streams_per_key,
            streams_per_project=read.streams_per_project,
            rate_limits={name: getattr(read, f"rate_limit_{name}") for name in DEFAULT_RATE_LIMITS},
            mcp_allowed_hosts=read.mcp_allowed_hosts,
            trust=Trust.from_settings(GATEWAY, read),
            sampling=read,
        )
