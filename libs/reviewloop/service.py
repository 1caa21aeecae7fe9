"""How every reviewloop gRPC service boots and stops.

``start()`` does the common part: the store (health NOT_SERVING until it is migrated), the service's
composition root (``ServiceSpec.bootstrap``), its servicers behind the boundary (``reviewloop.boundary``),
reflection, the outbox relay, background jobs and the ops endpoint; ``main()`` runs one until SIGTERM and
stops it gracefully. A service passes what is its own in a ``ServiceSpec``.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar, cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.metrics import NoOpMeterProvider
from sqlalchemy import MetaData, text

from reviewloop import metrics, reflection, telemetry
from reviewloop.boundary import HEALTH_SERVICE, BoundaryInterceptor
from reviewloop.common.v1 import common_pb2, outbox_pb2, outbox_pb2_grpc
from reviewloop.config import ConfigError, ServiceConfig, ServiceSettings
from reviewloop.contract import CONTRACT_VERSION
from reviewloop.inproc import MAX_MESSAGE_BYTES, InProcessChannel, LocalServer
from reviewloop.outbox_admin import OutboxAdmin
from reviewloop.rpc_trace import client_tracing
from reviewloop.storage import Database, driver, make_engine
from reviewloop.storage.engine import pool_probe
from reviewloop.storage.inbox import Subscription, ingest_each
from reviewloop.storage.migrations import migrate
from reviewloop.storage.outbox import Deliver, Relay, ingest_method, outbox_probe
from reviewloop.trust import Trust

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SHUTDOWN_GRACE_S = 5.0
READINESS_EVERY_S = 5.0

# A restarted peer is found again within a second instead of after gRPC's default backoff (up to 120 s).
# Messages carry whole drafts (2 MiB per body field) and their diffs, past gRPC's 4 MiB default
# (MAX_MESSAGE_BYTES, the in-process channel's bound too).
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


class Peers:
    """One long-lived, traced channel per peer service, created on first use.

    Each presents ``trust``'s credentials (a signed service token, a client certificate) when configured.
    With ``local`` (monolithic mode: the process's ``LocalServer`` of each service, by name) a call to a
    peer goes through an ``InProcessChannel`` to it, never over the peer's socket.
    """

    def __init__(
        self,
        addresses: Mapping[str, str],
        trust: Trust | None = None,
        local: Mapping[str, LocalServer] | None = None,
    ) -> None:
        self._addresses = addresses
        self._trust = trust or Trust()
        self._local = local
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, service: str) -> grpc.aio.Channel:
        """The channel to ``service``, which must be one of the peers the ServiceSpec declares."""
        if service not in self._addresses:
            raise KeyError(f"{service} is not a declared peer of this service (ServiceSpec.peers)")
        if service not in self._channels and self._local is not None:
            local = self._local
            channel = InProcessChannel(
                service, lambda: local.get(service), self._trust.signing(client_tracing())
            )
            self._channels[service] = cast(grpc.aio.Channel, channel)
        elif service not in self._channels:
            self._channels[service] = self._trust.channel(
                self._addresses[service],
                options=CHANNEL_OPTIONS,
                interceptors=client_tracing(),
            )
        return self._channels[service]

    async def close(self) -> None:
        """Close every channel opened so far; a later ``channel()`` opens a fresh one."""
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


# A servicer registration: (add_XServicer_to_server, servicer, full service name).
Registration = tuple[Callable[[Any, grpc.aio.Server], None], Any, str]


Job = Callable[[], Coroutine[Any, Any, None]]
E = TypeVar("E")


def _no_servicers(env: Any) -> Sequence[Registration]:
    return ()


@dataclass(frozen=True)
class ServiceSpec(Generic[E]):
    """What makes a service itself: its store's schema and migrations, its servicers, its subscribers.

    ``bootstrap`` is the service's composition root: it builds the one ``Env`` of the process from the
    store, the peers and the process's settings (an instance of ``settings``, read once at boot), which the
    servicers and the background jobs then share.
    """

    name: str
    metadata: MetaData
    migrations_dir: Path
    # The process's settings: ServiceSettings, or the service's own subclass of it.
    settings: type[ServiceSettings] = ServiceSettings
    # (store, peers, settings) -> Env; the settings are an instance of ``settings`` (typed there).
    bootstrap: Callable[[Database, Peers, Any], E] | None = None
    servicers: Callable[[E], Sequence[Registration]] = _no_servicers
    # The services this one calls (its relay's destinations are added to them).
    peers: Sequence[str] = ()
    # Outbox destination -> the full name of the gRPC service whose ``Ingest`` receives its events
    # (the destination is also the peer's name in the service config).
    subscribers: Mapping[str, str] = field(default_factory=dict)
    # Outbox destinations the service delivers itself, through an adapter of its own (review_state's
    # notification mail): destination -> deliver function, built from the service's ``Env``.
    local_subscribers: Callable[[E], Mapping[str, Deliver]] | None = None
    # Background tasks a service runs beside its server (sweeps, listeners).
    background: Callable[[E], Sequence[Job]] | None = None
    # The process entry point of a part that is not a gRPC service (the gateway); None serves ``main``.
    entrypoint: Callable[[], None] | None = None
    # The store gauges a metrics scrape reads (metrics.GAUGES); the outbox's are added for a relay.
    probes: Callable[[E], Sequence[metrics.Probe]] | None = None

    @classmethod
    def of(cls, package: str, **own: Any) -> ServiceSpec[Any]:
        """The spec of the service in ``package``, its store and migrations found where every service keeps them.

        DESIGN.md's layout: the schema is ``<package>.store.metadata``, the Alembic revisions are in
        ``<package>/migrations``. ``own`` is the rest of the spec (settings, bootstrap, servicers ...).
        """
        store = importlib.import_module(f"{package}.store")
        home = Path(str(importlib.import_module(package).__file__)).parent
        return cls(name=package, metadata=store.metadata, migrations_dir=home / "migrations", **own)

    def all_peers(self) -> tuple[str, ...]:
        """Every service this one talks to: the ones it calls and its relay's destinations."""
        return tuple(dict.fromkeys((*self.peers, *self.subscribers)))


@dataclass
class Serving:
    """A service's servers: its gRPC port, its in-process twin (monolithic mode) and gRPC health."""

    server: grpc.aio.Server
    health: health_aio.HealthServicer
    # Every gRPC service name the servers answer (health's own first): what health reports on.
    names: list[str]
    local: LocalServer | None = None
    port: int = 0

    async def set_health(self, status: Any) -> None:
        """Report ``status`` (a ``HealthCheckResponse`` status) for the server and each service name."""
        for name in ("", *self.names):
            await self.health.set(name, status)


class RunningService:
    """A started service; ``stop()`` is idempotent."""

    def __init__(
        self,
        serving: Serving,
        db: Database,
        peers: Peers,
        relay: Relay | None,
        tasks: list[asyncio.Task[None]],
    ) -> None:
        self.serving, self.db, self.peers, self.relay, self.tasks = serving, db, peers, relay, tasks
        # The HTTP ops endpoint (/metrics, /livez, /readyz), when the config places one.
        self.operations: asyncio.AbstractServer | None = None
        self._stopped = False

    @property
    def port(self) -> int:
        """The gRPC port the service listens on."""
        return self.serving.port

    async def ready(self) -> bool:
        """Whether the store answers and the relay (if any) runs: what ``/readyz`` and health report."""
        if self._stopped or (self.relay is not None and not self.relay.running):
            return False
        try:
            async with self.db.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception:
            log.warning("readiness: the store does not answer", exc_info=True)
            return False
        return True

    async def watch_readiness(self, every_s: float = READINESS_EVERY_S) -> None:
        """Keep gRPC health in step with ``ready()``: NOT_SERVING while the store or the relay is down."""
        serving = True
        while True:
            await asyncio.sleep(every_s)
            now = await self.ready()
            if now != serving and not self._stopped:
                serving = now
                await self.serving.set_health(SERVING if now else NOT_SERVING)

    async def stop(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        """Report NOT_SERVING, drain in-flight RPCs, then stop background tasks, relay, peers and store.

        Args:
            grace: Seconds in-flight RPCs get to finish before they are cancelled.
        """
        if self._stopped:
            return
        self._stopped = True
        await self.serving.health.enter_graceful_shutdown()
        if self.operations is not None:
            self.operations.close()
        local = self.serving.local
        await asyncio.gather(self.serving.server.stop(grace), *((local.stop(grace),) if local else ()))
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.relay:
            await self.relay.stop()
        await self.peers.close()
        await self.db.dispose()


async def ingest(
    db: Database,
    request: common_pb2.IngestRequest,
    subscriptions: Mapping[str, Subscription[Any]],
    on_commit: Callable[[Any], None] | None = None,
) -> common_pb2.IngestResponse:
    """The ``Ingest`` RPC of every subscribing service: each event handled once (``ingest_each``)."""
    done = await ingest_each(db, request.events, subscriptions, on_commit)
    return common_pb2.IngestResponse(accepted=done.accepted, duplicates=done.duplicates)


class PortTakenError(RuntimeError):
    """The service could not bind its listen address, usually because another process holds the port."""


async def start(
    spec: ServiceSpec[Any], config: ServiceConfig, local: dict[str, LocalServer] | None = None
) -> RunningService:
    """Build, bind, migrate and start ``spec``; health turns SERVING once the store is migrated.

    With ``local`` (monolithic mode) the service also answers the process's in-process channels: its
    ``LocalServer`` is put there under its name, and its peers are reached through theirs.
    """
    db = _store(config)
    peers = Peers(config.peers, config.trust, local)
    env: Any = spec.bootstrap(db, peers, config.settings) if spec.bootstrap else db
    serving = _servers(spec, config.trust, env, db, in_process=local is not None)
    await serving.set_health(NOT_SERVING)
    await _bind(spec, config, serving, db)
    if local is not None and serving.local is not None:
        local[spec.name] = serving.local
    await migrate(db.engine, spec.migrations_dir, spec.metadata)
    relay = _relay(spec, config, env, db, peers)
    tasks = [asyncio.create_task(job()) for job in (spec.background(env) if spec.background else ())]
    running = RunningService(serving, db, peers, relay, tasks)
    tasks.append(asyncio.create_task(running.watch_readiness(), name="readiness"))
    if config.metrics_listen:
        probes = [
            pool_probe(db.engine),
            *((outbox_probe(db),) if relay else ()),
            *(spec.probes(env) if spec.probes else ()),
        ]
        running.operations = await metrics.serve_http(config.metrics_listen, probes, running.ready)
    await serving.set_health(SERVING)
    log.info("%s serving on port %d (contract %s)", spec.name, serving.port, CONTRACT_VERSION)
    return running


def _store(config: ServiceConfig) -> Database:
    fast_paths = config.settings.fast_paths
    engine = make_engine(config.db_url, pool_size=config.settings.db_pool_size, fast_paths=fast_paths)
    if config.settings.trace_sql:
        # A span per statement and per pool checkout (13 of a lifecycle's 49 spans), on demand only. The
        # pool gauge is read on a scrape (pool_probe), not counted here on every checkout and checkin.
        SQLAlchemyInstrumentor().instrument(engine=engine.sync_engine, meter_provider=NoOpMeterProvider())
        driver.traced(engine)
    return Database(engine, fast_paths)


def _servers(spec: ServiceSpec[Any], trust: Trust, env: Any, db: Database, *, in_process: bool) -> Serving:
    """The gRPC server (and, ``in_process``, its in-process twin) with every servicer, health and reflection."""
    serving = Serving(
        grpc.aio.server(
            interceptors=[BoundaryInterceptor(trust)],
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        ),
        health_aio.HealthServicer(),
        [HEALTH_SERVICE],
        # The same servicers answer in process, through an interceptor of their own (its own handler cache).
        LocalServer(BoundaryInterceptor(trust)) if in_process else None,
    )
    servers: tuple[Any, ...] = (serving.server, *((serving.local,) if serving.local else ()))
    # Every store has an outbox, so every service answers its operator RPC (dead letters).
    outbox_admin: Registration = (
        outbox_pb2_grpc.add_OutboxAdminServiceServicer_to_server,
        OutboxAdmin(db, spec.name),
        outbox_pb2.DESCRIPTOR.services_by_name["OutboxAdminService"].full_name,
    )
    for add, servicer, full_name in (
        (health_pb2_grpc.add_HealthServicer_to_server, serving.health, None),
        *spec.servicers(env),
        outbox_admin,
    ):
        for each in servers:
            add(servicer, each)
        if full_name:
            serving.names.append(full_name)
    reflection.enable(serving.names, serving.server)
    return serving


async def _bind(spec: ServiceSpec[Any], config: ServiceConfig, serving: Serving, db: Database) -> None:
    """Bind the listen address and start the gRPC server; a taken port disposes of the store and raises."""
    try:
        serving.port = config.trust.add_port(serving.server, config.listen)
    except RuntimeError as exc:
        log.debug("bind failed: %s", exc)
    if serving.port == 0:
        await db.engine.dispose()
        raise PortTakenError(f"{spec.name}: cannot listen on {config.listen} (is the port taken?)")
    if config.trust.key is None and not config.trust.mtls and not _loopback(config.listen):
        log.warning(
            "%s listens on %s with no service authentication: any process that reaches the port can act "
            "as any tenant. Set REVIEWLOOP_SERVICE_AUTH_KEY or REVIEWLOOP_TLS_* (docs/operations.md).",
            spec.name,
            config.listen,
        )
    await serving.server.start()


def _relay(
    spec: ServiceSpec[Any], config: ServiceConfig, env: Any, db: Database, peers: Peers
) -> Relay | None:
    """The started outbox relay to the service's subscribers, or None when it has none."""
    if not spec.subscribers and not spec.local_subscribers:
        return None
    relay = Relay(
        db,
        {
            **{dest: ingest_method(peers.channel(dest), name) for dest, name in spec.subscribers.items()},
            **(spec.local_subscribers(env) if spec.local_subscribers else {}),
        },
        poll_interval_s=config.settings.relay_poll_s,
        retention=timedelta(seconds=config.settings.outbox_retention_s),
    )
    relay.start()
    return relay


def _loopback(listen: str) -> bool:
    """Whether only this machine reaches ``listen``: a loopback host, or a Unix socket (``unix:``)."""
    if listen.startswith(("unix:", "unix-abstract:")):
        return True
    host = listen.rpartition(":")[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


# The cyclic collector's thresholds once a process has booted. At CPython's 700 (allocations net of
# frees) the young generation was collected every few requests: the gateway ran ~720 collections in one
# lifecycle run for 0.29 s of CPU, review_state ~620 for 0.19 s. A request's objects die by reference
# count long before 10,000 accumulate, so the collector now mostly finds nothing to do.
GC_THRESHOLD = (10_000, 10, 10)


def settle_heap() -> None:
    """Once the process has booted: freeze what boot built out of the cyclic collector's reach.

    Collect, freeze the survivors (modules, routes, schemas, descriptors, metadata) and raise the
    thresholds (``GC_THRESHOLD``). Every full collection walked the whole boot heap: a gateway's took
    up to 144 ms of CPU, with every request it held waiting, and review_state's 66 ms; after the freeze
    ~2 ms. Frozen objects are still freed by reference count; only a cycle among them would be kept.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def main(spec: ServiceSpec[Any]) -> None:
    """Process entry point: read the settings once, run ``spec`` until SIGTERM or SIGINT, stop gracefully."""
    telemetry.setup_logging()
    try:
        config = ServiceConfig.read(spec.name, spec.all_peers(), os.environ, spec.settings)
    except ConfigError as exc:
        _exit(exc)
    provider = telemetry.setup(
        spec.name, config.settings.data_dir, config.settings.otlp_endpoint, config.settings
    )
    metrics.setup(spec.name)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        running = await start(spec, config)
        settle_heap()
        await stop.wait()
        log.info("%s stopping", spec.name)
        await running.stop()

    try:
        _run_loop(run())
    except (PortTakenError, ConfigError) as exc:
        _exit(exc)
    finally:
        provider.shutdown()


def _exit(error: Exception) -> NoReturn:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


def _run_loop(coro: Any) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency everywhere but Windows
        asyncio.run(coro)
    else:
        uvloop.run(coro)
