"""Configuration of a service process, read once from the environment (``reviewloop.settings``).

Every service reads ``REVIEWLOOP_<SERVICE>_DB`` (its store) and ``REVIEWLOOP_<SERVICE>_ADDR`` (where it
listens, and where its peers find it). An unset store is SQLite under the data directory. Addresses have
no default here: the product's composition root (``stack``) knows the parts and fills them in. The
settings every service shares are :class:`ServiceSettings`; a service's own subclass it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from reviewloop.files import generated_secret
from reviewloop.settings import ConfigError, Settings, Switch, Text, variable
from reviewloop.storage.engine import DEFAULT_POOL_SIZE
from reviewloop.telemetry import TelemetrySettings
from reviewloop.trust import Trust, TrustSettings

__all__ = ["ConfigError", "ServiceConfig", "ServiceSettings"]

DATA_DIR = "REVIEWLOOP_DATA_DIR"


class DataSettings(Settings):
    """Where a process keeps its files."""

    data_dir: Path = variable(
        DATA_DIR, Path(".data"), "SQLite files, logs, traces, the generated admin token"
    )


class ServiceSettings(TrustSettings, TelemetrySettings, DataSettings):
    """What every service process reads, besides its placement (``REVIEWLOOP_<PART>_ADDR``, ``_DB``)."""

    title = "Every service and the gateway"

    otlp_endpoint: Text = variable(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        None,
        "export traces over OTLP instead of `.data/traces.jsonl`",
        unset="unset: `.data/traces.jsonl`",
    )
    relay_poll_s: float = variable(
        "REVIEWLOOP_RELAY_POLL_S", 0.5, "How often the outbox relay looks for events to deliver", gt=0
    )
    outbox_retention_s: float = variable(
        "REVIEWLOOP_OUTBOX_RETENTION_S",
        7 * 24 * 3600.0,
        "delivered outbox rows and seen event ids are forgotten after this; dead letters (events a receiver refused for good, `INVALID_ARGUMENT`/`FAILED_PRECONDITION`, set aside with the reason so their aggregate's later events go on) are kept for an admin",
        ge=0,
    )
    # Off by default: it cost more CPU than the statements' own work and tripled a lifecycle's spans.
    trace_sql: Switch = variable(
        "REVIEWLOOP_TRACE_SQL", False, "`1`: a span per store statement (costly: see docs/performance.md)"
    )
    db_pool_size: int = variable(
        "REVIEWLOOP_DB_POOL_SIZE",
        DEFAULT_POOL_SIZE,
        "PostgreSQL connections one process may hold; each is kept once opened (a statement beyond them waits for one), so size the server's `max_connections` for every process and replica",
        ge=1,
    )


def data_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where SQLite files, logs, traces and the generated admin token live (``REVIEWLOOP_DATA_DIR``)."""
    return DataSettings.from_env(env).data_dir


def deployment_secret(value: str | None, filename: str, data: Path) -> bytes:
    """A deployment secret: its variable's ``value``, else one generated into the data directory.

    The file ``<data>/<filename>`` is created (mode 0600) when absent; it suits one process with a
    kept data directory only, so replicas must share the variable.

    Args:
        value: The variable's value (e.g. ``REVIEWLOOP_COMPOSITION_TOKEN_KEY``), None when unset.
        filename: The file under the data directory that holds a generated one.
        data: The data directory.

    Returns:
        The secret's bytes.
    """
    if value:
        return value.encode()
    return generated_secret(data / filename, lambda: secrets.token_urlsafe(32)).encode()


def db_pool_size(env: Mapping[str, str] = os.environ) -> int:
    """PostgreSQL connections one process may hold, all kept once opened (``REVIEWLOOP_DB_POOL_SIZE``).

    Raises:
        ConfigError: not a whole number of at least 1.
    """
    return ServiceSettings.from_env(env).db_pool_size


def db_variable(name: str) -> str:
    """The environment variable that names the store of part ``name``."""
    return f"REVIEWLOOP_{name.upper()}_DB"


def db_url(service: str, env: Mapping[str, str] = os.environ) -> str:
    """The service's DSN; ``postgresql://`` is rewritten to the asyncpg driver."""
    url = env.get(db_variable(service))
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
    trace_sql: Switch = False
    db_pool_size: int = DEFAULT_POOL_SIZE

    @classmethod
    def from_env(
        cls, service: str, peers: Iterable[str] = (), env: Mapping[str, str] = os.environ
    ) -> ServiceConfig:
        """Read the configuration of ``service``, which calls ``peers``.

        Raises:
            ConfigError: A setting does not parse, or a part's address is unset.
        """
        settings = ServiceSettings.from_env(env)
        return cls(
            service=service,
            db_url=db_url(service, env),
            listen=address(service, env),
            data_dir=settings.data_dir,
            peers={name: address(name, env) for name in peers},
            otlp_endpoint=settings.otlp_endpoint,
            relay_poll_s=settings.relay_poll_s,
            outbox_retention_s=settings.outbox_retention_s,
            metrics_listen=env.get(metrics_variable(service)) or None,
            trust=Trust.from_settings(service, settings),
            trace_sql=settings.trace_sql,
            db_pool_size=settings.db_pool_size,
        )
