"""Gateway settings, read once from the environment."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from reviewloop.config import address, data_dir, db_pool_size, db_url, metrics_variable
from reviewloop.files import generated_secret
from reviewloop.storage.engine import DEFAULT_POOL_SIZE

GATEWAY = "gateway"
# The services the gateway fronts (its peers).
BACKENDS = ("review_state", "rules", "diff", "nudge", "dispatch_budget")

ADMIN_TOKEN_ENV = "REVIEWLOOP_ADMIN_TOKEN"
DEFAULT_MAX_BODY = 4 * 1024 * 1024


def admin_token_path(env: Mapping[str, str] = os.environ) -> Path:
    return data_dir(env) / "admin-token"


def admin_token_source(env: Mapping[str, str] = os.environ) -> str:
    """Where the bootstrap admin token comes from, for ``reviewloop up`` to print."""
    return f"${ADMIN_TOKEN_ENV}" if env.get(ADMIN_TOKEN_ENV) else str(admin_token_path(env))


def load_admin_token(env: Mapping[str, str] = os.environ) -> str:
    """``REVIEWLOOP_ADMIN_TOKEN``, or the one in ``.data/admin-token``, generated (mode 0600) when absent."""
    if env.get(ADMIN_TOKEN_ENV):
        return env[ADMIN_TOKEN_ENV]
    return generated_secret(admin_token_path(env), lambda: "rladm_" + secrets.token_urlsafe(32))


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
    # Where /metrics is served apart from the public port (REVIEWLOOP_GATEWAY_METRICS_ADDR; the
    # manifests set it): the public port then answers it 404. Unset: /metrics on the public port.
    metrics_listen: str | None = None
    # Open review-event streams on this gateway, per key and per project (0: no cap); see feeds.Feeds.
    streams_per_key: int = 5
    streams_per_project: int = 50
    # The agent plane's rate limits (``limits`` notation, "off" for none); see gateway.ratelimits.
    rate_limits: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_RATE_LIMITS))

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> GatewaySettings:
        host, _, port = address(GATEWAY, env).rpartition(":")
        return cls(
            db_url=db_url(GATEWAY, env),
            host=host,
            port=int(port),
            data_dir=data_dir(env),
            peers={name: address(name, env) for name in BACKENDS},
            admin_token=load_admin_token(env),
            max_body_bytes=int(env.get("REVIEWLOOP_MAX_BODY_BYTES", DEFAULT_MAX_BODY)),
            backend_timeout_s=float(env.get("REVIEWLOOP_BACKEND_TIMEOUT_S", "10")),
            otlp_endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
            key_cache_s=float(env.get("REVIEWLOOP_GATEWAY_KEY_CACHE_S", "1")),
            idempotency_lease_s=float(env.get("REVIEWLOOP_GATEWAY_IDEMPOTENCY_LEASE_S", "30")),
            sse_heartbeat_s=float(env.get("REVIEWLOOP_SSE_HEARTBEAT_S", "15")),
            db_pool_size=db_pool_size(env),
            metrics_listen=env.get(metrics_variable(GATEWAY)) or None,
            streams_per_key=int(env.get("REVIEWLOOP_STREAMS_PER_KEY", "5")),
            streams_per_project=int(env.get("REVIEWLOOP_STREAMS_PER_PROJECT", "50")),
            rate_limits={
                name: env.get(rate_limit_env(name), default) for name, default in DEFAULT_RATE_LIMITS.items()
            },
            mcp_allowed_hosts=tuple(
                h.strip()
                for h in env.get("REVIEWLOOP_MCP_ALLOWED_HOSTS", ",".join(LOOPBACK_HOSTS)).split(",")
                if h.strip()
            ),
        )
