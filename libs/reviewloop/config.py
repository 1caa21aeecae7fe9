"""Configuration of a service process, read once from the environment (``reviewloop.settings``).

The settings every service shares are :class:`ServiceSettings`; a service's own subclass it. Its
placement is read in the same object (``ServiceSettings.placed``): ``REVIEWLOOP_<PART>_ADDR`` (where a
part listens, and where its peers find it), ``REVIEWLOOP_<PART>_DB`` (its store; unset, SQLite under the
data directory) and ``REVIEWLOOP_<PART>_METRICS_ADDR``. Addresses have no default here: the product's
composition root (``stack``) knows the parts and fills them in.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

# create_model is banned for JSON shapes (reviewloop.shapes); here it makes settings fields named after parts.
from pydantic import create_model, field_validator  # noqa: TID251

from reviewloop.files import generated_secret
from reviewloop.settings import CommaList, ConfigError, Settings, Switch, Text, variable
from reviewloop.storage import fastpaths
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
    slow_paths: CommaList = variable(
        fastpaths.ENV,
        (),
        f"storage fast paths to turn off, comma-separated ({', '.join(fastpaths.NAMES)}), or `all`: each then takes its plain path (docs/performance.md)",
        unset="none: every fast path on",
    )
    # The parts whose placement these settings read (``placed``): none for the class a module declares.
    parts: ClassVar[tuple[str, ...]] = ()

    @field_validator("slow_paths")
    @classmethod
    def _known_paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        fastpaths.enabled(value)  # an unknown name is a ValueError
        return value

    @property
    def fast_paths(self) -> frozenset[str]:
        """The storage fast paths this process takes: every one ``slow_paths`` does not turn off."""
        return fastpaths.enabled(self.slow_paths)

    @classmethod
    def placed(cls, *parts: str) -> type[Self]:
        """These settings with the placement of ``parts`` as fields.

        Each part's ``REVIEWLOOP_<PART>_ADDR``, ``_DB`` and ``_METRICS_ADDR``: the variables are named after
        the parts, so these fields are made per process.
        """
        parts = tuple(dict.fromkeys(parts))
        fields: dict[str, Any] = {}
        for part in parts:
            for name, what in (
                (address_variable(part), f"where {part} listens"),
                (db_variable(part), f"the store of {part}"),
                (metrics_variable(part), f"where {part} serves /metrics"),
            ):
                fields[_field(name)] = (Text, variable(name, None, what))
        placed = create_model(f"{cls.__name__}[{','.join(parts)}]", __base__=cls, **fields)
        placed.parts = parts
        return placed

    def address(self, part: str) -> str:
        """Where ``part`` (one of the placed ``parts``) listens: ``host:port`` or ``unix:path``.

        Raises:
            ConfigError: its ``REVIEWLOOP_<PART>_ADDR`` is unset.
        """
        value: str | None = getattr(self, _field(address_variable(part)), None)
        if not value:
            raise ConfigError(
                f"{address_variable(part)} is not set: start reviewloop with `reviewloop up` or "
                f"`reviewloop serve {part}`, which place every part, or set it to host:port."
            )
        return value

    def db_url(self, part: str) -> str:
        """The store of ``part``: its ``REVIEWLOOP_<PART>_DB``, else SQLite under the data directory.

        A ``postgresql://`` URL is rewritten to the asyncpg driver.
        """
        url: str | None = getattr(self, _field(db_variable(part)), None)
        if not url:
            return f"sqlite+aiosqlite:///{self.data_dir / f'{part}.db'}"
        for plain in ("postgresql://", "postgres://"):
            if url.startswith(plain):
                return "postgresql+asyncpg://" + url[len(plain) :]
        return url

    def metrics_address(self, part: str) -> str | None:
        """Where ``part`` serves ``/metrics``, ``/livez`` and ``/readyz`` (None: no such endpoint)."""
        value: str | None = getattr(self, _field(metrics_variable(part)), None)
        return value


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


def db_variable(name: str) -> str:
    """The environment variable that names the store of part ``name``."""
    return f"REVIEWLOOP_{name.upper()}_DB"


def address_variable(name: str) -> str:
    """The environment variable that places part ``name``."""
    return f"REVIEWLOOP_{name.upper()}_ADDR"


def metrics_variable(name: str) -> str:
    """The environment variable that places the ``/metrics`` endpoint of a gRPC service."""
    return f"REVIEWLOOP_{name.upper()}_METRICS_ADDR"


def _field(variable: str) -> str:
    return variable.lower()


@dataclass(frozen=True)
class ServiceConfig:
    """What one service process boots with: its placement and trust, and the settings it read once."""

    service: str
    db_url: str
    listen: str
    peers: Mapping[str, str]
    # The process's whole settings object (the service's own subclass), which its bootstrap wires from.
    settings: ServiceSettings = field(default_factory=ServiceSettings)
    # Where /metrics, /livez and /readyz answer (host:port); None serves no such endpoint.
    metrics_listen: str | None = None
    # How calls to and from this service authenticate (none on the loopback default).
    trust: Trust = field(default_factory=Trust)

    @classmethod
    def of(cls, service: str, peers: Iterable[str], settings: ServiceSettings) -> ServiceConfig:
        """The configuration of ``service``, which calls ``peers``, from its placed ``settings``.

        Raises:
            ConfigError: A part's address is unset, or the trust settings are incomplete.
        """
        return cls(
            service=service,
            db_url=settings.db_url(service),
            listen=settings.address(service),
            peers={name: settings.address(name) for name in peers},
            settings=settings,
            metrics_listen=settings.metrics_address(service),
            trust=Trust.from_settings(service, settings),
        )

    @classmethod
    def read(
        cls,
        service: str,
        peers: Iterable[str],
        env: Mapping[str, str],
        settings: type[ServiceSettings] = ServiceSettings,
    ) -> ServiceConfig:
        """Read ``settings`` (the service's own class) with the placement of ``service`` and ``peers``, once.

        Raises:
            ConfigError: A setting does not parse, or a part's address is unset.
        """
        peers = tuple(peers)
        return cls.of(service, peers, settings.placed(service, *peers).from_env(env))
