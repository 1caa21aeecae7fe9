"""Configuration, read once from the environment into frozen dataclasses.

Every service reads ``REVIEWLOOP_<SERVICE>_DB`` (its store) and ``REVIEWLOOP_<SERVICE>_ADDR`` (where it
listens, and where its peers find it). Unset, the embedded default is SQLite under the data directory
and the fixed loopback ports below.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SERVICES = ("review_state", "rules", "diff", "nudge", "dispatch_budget")
GATEWAY = "gateway"

DEFAULT_PORTS: Mapping[str, int] = {
    "review_state": 50151,
    "rules": 50152,
    "diff": 50153,
    "nudge": 50154,
    "dispatch_budget": 50155,
    GATEWAY: 8080,
}


def data_dir(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env.get("REVIEWLOOP_DATA_DIR", ".data"))


def db_url(service: str, env: Mapping[str, str] = os.environ) -> str:
    """The service's DSN; ``postgresql://`` is rewritten to the asyncpg driver."""
    url = env.get(f"REVIEWLOOP_{service.upper()}_DB")
    if not url:
        return f"sqlite+aiosqlite:///{data_dir(env) / f'{service}.db'}"
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+asyncpg://" + url[len(plain) :]
    return url


def address(service: str, env: Mapping[str, str] = os.environ) -> str:
    return env.get(f"REVIEWLOOP_{service.upper()}_ADDR", f"127.0.0.1:{DEFAULT_PORTS[service]}")


@dataclass(frozen=True)
class ServiceConfig:
    """What one service process needs to boot."""

    service: str
    db_url: str
    listen: str
    data_dir: Path
    peers: Mapping[str, str]
    otlp_endpoint: str | None
    relay_poll_s: float = 0.5
    outbox_retention_s: float = 7 * 24 * 3600

    @classmethod
    def from_env(cls, service: str, env: Mapping[str, str] = os.environ) -> ServiceConfig:
        return cls(
            service=service,
            db_url=db_url(service, env),
            listen=address(service, env),
            data_dir=data_dir(env),
            peers={name: address(name, env) for name in SERVICES},
            otlp_endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
            relay_poll_s=float(env.get("REVIEWLOOP_RELAY_POLL_S", "0.5")),
            outbox_retention_s=float(env.get("REVIEWLOOP_OUTBOX_RETENTION_S", 7 * 24 * 3600)),
        )
