"""Configuration, read once from the environment into frozen dataclasses.

Every service reads ``REVIEWLOOP_<SERVICE>_DB`` (its store) and ``REVIEWLOOP_<SERVICE>_ADDR`` (where it
listens, and where its peers find it). An unset store is SQLite under the data directory. Addresses have
no default here: the product's composition root (``stack``) knows the parts and fills them in.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from reviewloop.files import generated_secret
from reviewloop.storage.engine import DEFAULT_POOL_SIZE
from reviewloop.trust import Trust


class ConfigError(RuntimeError):
    """A setting the process cannot start without is missing or malformed."""


def data_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where SQLite files, logs, traces and the generated admin token live (``REVIEWLOOP_DATA_DIR``)."""
    return Path(env.get("REVIEWLOOP_DATA_DIR", ".data"))


def deployment_secret(variable: str, filename: str, env: Mapping[str, str] = os.environ) -> bytes:
    """A deployment secret: the environment's ``variable``, else one generated into the data directory.

    The file ``<data dir>/<filename>`` is created (mode 0600) when absent; it suits one process with a
    kept data directory only, so replicas must share the variable.

    Args:
        variable: The environment variable naming the secret, e.g. ``REVIEWLOOP_COMPOSITION_TOKEN_KEY``.
        filename: The file under the data directory that holds a generated one.
        env: The environment to read.

    Returns:
        The secret's bytes.
    """
    if env.get(variable):
        return env[variable].encode()
    return generated_secret(data_dir(env) / filename, lambda: secrets.token_urlsafe(32)).encode()


def db_pool_size(env: Mapping[str, str] = os.environ) -> int:
    """PostgreSQL connections one process may hold, all kept once opened (``REVIEWLOOP_DB_POOL_SIZE``).

    Raises:
        ConfigError: not a whole number of at least 1.
    """
    value = env.get("REVIEWLOOP_DB_POOL_SIZE", str(DEFAULT_POOL_SIZE))
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"REVIEWLOOP_DB_POOL_SIZE must be a whole number of at least 1, not {value!r}.")
    return int(value)


def db_url(service: str, env: Mapping[str, str] = os.environ) -> str:
    """The service's DSN; ``postgresql://`` is rewritten to the asyncpg driver."""
    url = env.get(f"REVIEWLOOP_{service.upper()}_DB")
    if not url:
        return f"sqlite+aiosqlite:///{data_dir(env) / f'{service}.db'}"
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+asyncpg://" + url[len(plain) :]
    return url


def address_variable(name: str) -> str:
    """The environment variable that places part ``name``."""
    return f"REVIEWLOOP_{name.upper()}_ADDR"


def metrics_variable(name: str) -> str:
    """The environment variable that places the ``/metrics`` endpoint of a gRPC service."""
    return f"REVIEWLOOP_{name.upper()}_METRICS_ADDR"


def address(name: str, env: Mapping[str, str] = os.environ) -> str:
    """Where part ``name`` listens (``host:port``).

    Raises:
        ConfigError: the variable is unset.
    """
    value = env.get(address_variable(name))
    if not value:
        raise ConfigError(
            f"{address_variable(name)} is not set: start reviewloop with `reviewloop up` or "
            f"`reviewloop serve {name}`, which place every part, or set it to host:port."
        )
    return value


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
    # Where /metrics, /livez and /readyz answer (host:port); None serves no such endpoint.
    metrics_listen: str | None = None
    # How calls to and from this service authenticate (none on the loopback default).
    trust: Trust = field(default_factory=Trust)
    # A span per store statement (``REVIEWLOOP_TRACE_SQL=1``): off by default, as it cost more CPU
    # than the statements' own work and tripled the spans of a lifecycle.
    trace_sql: bool = False
    db_pool_size: int = DEFAULT_POOL_SIZE

    @classmethod
    def from_env(
        cls, service: str, peers: Iterable[str] = (), env: Mapping[str, str] = os.environ
    ) -> ServiceConfig:
        """Read the configuration of ``service``, which calls ``peers``."""
        return cls(
            service=service,
            db_url=db_url(service, env),
            listen=address(service, env),
            data_dir=data_dir(env),
            peers={name: address(name, env) for name in peers},
            otlp_endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
            relay_poll_s=float(env.get("REVIEWLOOP_RELAY_POLL_S", "0.5")),
            outbox_retention_s=float(env.get("REVIEWLOOP_OUTBOX_RETENTION_S", 7 * 24 * 3600)),
            metrics_listen=env.get(metrics_variable(service)) or None,
            trust=Trust.from_env(service, env),
            trace_sql=env.get("REVIEWLOOP_TRACE_SQL", "") not in ("", "0", "false"),
            db_pool_size=db_pool_size(env),
        )
