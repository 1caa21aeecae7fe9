"""The gRPC service bootstrap every reviewloop service boots through.

``serve()`` does the common part: config, telemetry, engine, health (NOT_SERVING until the store is
migrated), reflection, interceptors that turn domain errors into ``google.rpc.Status`` and never leak
a traceback, the outbox relay, and a graceful stop on SIGTERM. A service passes what is its own in a
``ServiceSpec``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar, cast

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_status import rpc_status
from opentelemetry import trace
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.metrics import NoOpMeterProvider
from sqlalchemy import MetaData, text

from reviewloop import metrics, reflection, telemetry
from reviewloop.common.v1 import common_pb2, outbox_pb2, outbox_pb2_grpc
from reviewloop.config import ConfigError, ServiceConfig
from reviewloop.contract import CONTRACT_VERSION
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.inproc import MAX_MESSAGE_BYTES, InProcessChannel, LocalServer
from reviewloop.outbox_admin import OutboxAdmin
from reviewloop.rpc_errors import grpc_code, to_status
from reviewloop.rpc_trace import STATUS_CODE, client_tracing, served
from reviewloop.storage import Database, driver, make_engine
from reviewloop.storage.engine import pool_probe
from reviewloop.storage.inbox import Subscription, ingest_each
from reviewloop.storage.migrations import migrate
from reviewloop.storage.outbox import Deliver, Relay, ingest_method, outbox_probe
from reviewloop.storage.unavailable import store_unavailable
from reviewloop.trust import Trust, require_caller

log = logging.getLogger(__name__)

HEALTH_SERVICE = "grpc.health.v1.Health"
HEALTH_PREFIX = f"/{HEALTH_SERVICE}/"
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

    ``bootstrap`` is the service's composition root: it builds the one ``Env`` of the process (settings
    read from the environment, the store, peers, adapters), which the servicers and the background jobs
    then share.
    """

    name: str
    metadata: MetaData
    migrations_dir: Path
    bootstrap: Callable[[Database, Peers], E] | None = None
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

    def all_peers(self) -> tuple[str, ...]:
        """Every service this one talks to: the ones it calls and its relay's destinations."""
        return tuple(dict.fromkeys((*self.peers, *self.subscribers)))


def nul_field(message: Message, path: str = "") -> str | None:
    """The JSON-pointer path of the first string holding a NUL character, or None.

    PostgreSQL cannot store NUL in text, so every service refuses it at the door with a 400 rather than
    failing (500) at the first write; SQLite stores it, which would make the two backends disagree.
    """
    for descriptor, value in message.ListFields():
        where = f"{path}/{descriptor.name}"
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(item, Message):
                    found = nul_field(item, f"{where}/{key}")
                elif "\x00" in f"{key}{item}":
                    found = f"{where}/{key}"
                else:
                    found = None
                if found:
                    return found
            continue
        items = list(enumerate(value)) if descriptor.is_repeated else [(None, value)]
        for index, item in items:
            here = where if index is None else f"{where}/{index}"
            if isinstance(item, Message):
                if found := nul_field(item, here):
                    return found
            elif isinstance(item, str) and "\x00" in item:
                return here
    return None


def _refuse_nul(request: Any) -> None:
    if isinstance(request, Message) and (where := nul_field(request)):
        raise invalid(where, "must not contain a NUL character")


# Every answer carries the contract version, in trailing metadata: it rides the batch that ends the
# call, where initial metadata would cost a send of its own on every RPC.
VERSION_METADATA = (("x-contract-version", CONTRACT_VERSION),)


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


async def _fail(context: grpc.aio.ServicerContext[Any, Any], error: DomainError) -> None:
    # gRPC's instrumentation leaves a client error (NOT_FOUND, ABORTED...) UNSET; an SRE filters on ERROR.
    telemetry.mark_error(error.code.value, error.detail)
    status = rpc_status.to_status(to_status(error))
    await context.abort_with_status(
        _Status(status.code, status.details, (*status.trailing_metadata, *VERSION_METADATA))
    )


async def _crash(context: grpc.aio.ServicerContext[Any, Any], behavior: Any) -> NoReturn:
    log.exception("unhandled error in %s", behavior)
    telemetry.mark_error("internal")
    await context.abort(
        grpc.StatusCode.INTERNAL, "The service failed to handle the request.", VERSION_METADATA
    )


def _not_answering(behavior: Any, exc: Exception) -> DomainError:
    """The store did not answer (``storage.unavailable``): the caller may retry, so ``unavailable``."""
    log.warning("store not answering in %s: %s: %s", behavior, type(exc).__name__, exc)
    return DomainError(Code.UNAVAILABLE, "The service's store is not answering; retry shortly.")


def _annotate(message: Any) -> None:
    """Put the review a request or answer names on the RPC's server span (the submit's from its answer)."""
    span = trace.get_current_span()
    if span.is_recording() and isinstance(message, Message):
        span.set_attributes(telemetry.review_attributes(message))


class _Outcome:
    """How one call ended, for its metric and its span: the gRPC status and the problem code."""

    def __init__(self, method: str) -> None:
        self.method, self.status, self.code = method, grpc.StatusCode.OK, ""
        self.started = time.perf_counter()

    def failed(self, error: DomainError) -> None:
        self.status, self.code = grpc_code(error), error.code.value

    def record(self) -> None:
        metrics.record_rpc(self.method, self.status.name, self.code, time.perf_counter() - self.started)
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute(STATUS_CODE, self.status.value[0])


def _span(method: str, metadata: Any) -> contextlib.AbstractContextManager[Any]:
    """The call's SERVER span (health checks, probed every few seconds, get none)."""
    if method.startswith(HEALTH_PREFIX):
        return contextlib.nullcontext()
    return served(method, metadata)


def _wrap_unary(
    method: str, trust: Trust, behavior: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        context.set_trailing_metadata(VERSION_METADATA)
        metadata = context.invocation_metadata()
        with _span(method, metadata):
            outcome = _Outcome(method)
            try:
                require_caller(trust, method, metadata)
                _annotate(request)
                _refuse_nul(request)
                response = await behavior(request, context)
                _annotate(response)
                return response
            except DomainError as error:
                outcome.failed(error)
                await _fail(context, error)
            except asyncio.CancelledError:
                outcome.status = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                if not store_unavailable(exc):
                    outcome.status, outcome.code = grpc.StatusCode.INTERNAL, "internal"
                    await _crash(context, behavior)
                away = _not_answering(behavior, exc)
                outcome.failed(away)
                await _fail(context, away)
            finally:
                outcome.record()

    return unary


def _wrap_stream(
    method: str, trust: Trust, behavior: Callable[..., AsyncIterator[Any]]
) -> Callable[..., AsyncIterator[Any]]:
    async def stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        context.set_trailing_metadata(VERSION_METADATA)
        metadata = context.invocation_metadata()
        with _span(method, metadata):
            outcome = _Outcome(method)
            try:
                require_caller(trust, method, metadata)
                _annotate(request)
                _refuse_nul(request)
                async for item in behavior(request, context):
                    yield item
            except DomainError as error:
                outcome.failed(error)
                await _fail(context, error)
            except asyncio.CancelledError:
                outcome.status = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                if not store_unavailable(exc):
                    outcome.status, outcome.code = grpc.StatusCode.INTERNAL, "internal"
                    await _crash(context, behavior)
                away = _not_answering(behavior, exc)
                outcome.failed(away)
                await _fail(context, away)
            finally:
                outcome.record()

    return stream


class BoundaryInterceptor(grpc.aio.ServerInterceptor):
    """Apply the service-boundary guarantees to every unary and server-streaming RPC.

    Each call is a SERVER span of its caller's trace (``rpc_trace.served``), a call without a valid
    service token is refused when ``trust`` has a key (``trust.require_caller``), NUL strings are
    refused, a DomainError is mapped to status + details, anything else becomes a bare INTERNAL with no
    traceback, and every answer carries ``x-contract-version``.

    A method's wrapped handler is built on its first call and reused (the registered servicers never
    change): a call then costs no handler lookup and no wrapper built.
    """

    def __init__(self, trust: Trust | None = None) -> None:
        self.trust = trust or Trust()
        self._wrapped: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """The method's wrapped handler.

        A client-streaming or bidi one (reflection) is left as it is, refused (None) when it needs a
        service token the call does not carry.
        """
        method = handler_call_details.method
        if wrapped := self._wrapped.get(method):
            return wrapped
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(
                _wrap_unary(method, self.trust, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        elif handler.unary_stream is not None:
            wrapped = grpc.unary_stream_rpc_method_handler(
                # grpc.aio runs async generators here; the stubs only know the sync server's type.
                _wrap_stream(
                    method, self.trust, cast(Callable[..., AsyncIterator[Any]], handler.unary_stream)
                ),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        else:
            try:
                require_caller(self.trust, method, handler_call_details.invocation_metadata)
            except DomainError:
                return None
            return handler
        self._wrapped[method] = wrapped
        return wrapped


class RunningService:
    """A started service; ``stop()`` is idempotent."""

    def __init__(
        self,
        server: grpc.aio.Server,
        health: health_aio.HealthServicer,
        db: Database,
        peers: Peers,
        relay: Relay | None,
        tasks: list[asyncio.Task[None]],
        port: int,
        operations: asyncio.AbstractServer | None = None,
        local: LocalServer | None = None,
    ) -> None:
        self.server, self.health, self.db, self.peers = server, health, db, peers
        self.relay, self.tasks, self.port = relay, tasks, port
        self.operations, self.local = operations, local
        self._stopped = False

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

    async def watch_readiness(self, names: Sequence[str], every_s: float = READINESS_EVERY_S) -> None:
        """Keep gRPC health in step with ``ready()``: NOT_SERVING while the store or the relay is down."""
        serving = True
        while True:
            await asyncio.sleep(every_s)
            now = await self.ready()
            if now != serving and not self._stopped:
                serving = now
                status = (
                    health_pb2.HealthCheckResponse.SERVING
                    if now
                    else health_pb2.HealthCheckResponse.NOT_SERVING
                )
                for name in ("", *names):
                    await self.health.set(name, status)

    async def stop(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        """Report NOT_SERVING, drain in-flight RPCs, then stop background tasks, relay, peers and store.

        Args:
            grace: Seconds in-flight RPCs get to finish before they are cancelled.
        """
        if self._stopped:
            return
        self._stopped = True
        await self.health.enter_graceful_shutdown()
        if self.operations is not None:
            self.operations.close()
        await asyncio.gather(self.server.stop(grace), *((self.local.stop(grace),) if self.local else ()))
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
    engine = make_engine(config.db_url, pool_size=config.db_pool_size)
    if config.trace_sql:
        # A span per statement and per pool checkout (13 of a lifecycle's 49 spans), on demand only. The
        # pool gauge is read on a scrape (pool_probe), not counted here on every checkout and checkin.
        SQLAlchemyInstrumentor().instrument(engine=engine.sync_engine, meter_provider=NoOpMeterProvider())
        driver.traced(engine)
    db = Database(engine)
    peers = Peers(config.peers, config.trust, local)
    server = grpc.aio.server(
        interceptors=[BoundaryInterceptor(config.trust)],
        options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    # The same servicers answer in process, through an interceptor of their own (its own handler cache).
    in_process = LocalServer(BoundaryInterceptor(config.trust)) if local is not None else None
    servers: tuple[Any, ...] = (server, in_process) if in_process else (server,)
    health = health_aio.HealthServicer()
    for each in servers:
        health_pb2_grpc.add_HealthServicer_to_server(health, each)
    names = [HEALTH_SERVICE]
    env: Any = spec.bootstrap(db, peers) if spec.bootstrap else db
    # Every store has an outbox, so every service answers its operator RPC (dead letters).
    outbox_admin: Registration = (
        outbox_pb2_grpc.add_OutboxAdminServiceServicer_to_server,
        OutboxAdmin(db, spec.name),
        outbox_pb2.DESCRIPTOR.services_by_name["OutboxAdminService"].full_name,
    )
    for add, servicer, full_name in (*spec.servicers(env), outbox_admin):
        for each in servers:
            add(servicer, each)
        names.append(full_name)
    reflection.enable(names, server)
    for name in ("", *names):
        await health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    try:
        port = config.trust.add_port(server, config.listen)
    except RuntimeError as exc:
        port = 0
        log.debug("bind failed: %s", exc)
    if port == 0:
        await engine.dispose()
        raise PortTakenError(f"{spec.name}: cannot listen on {config.listen} (is the port taken?)")
    if config.trust.key is None and not config.trust.mtls and not _loopback(config.listen):
        log.warning(
            "%s listens on %s with no service authentication: any process that reaches the port can act "
            "as any tenant. Set REVIEWLOOP_SERVICE_AUTH_KEY or REVIEWLOOP_TLS_* (docs/operations.md).",
            spec.name,
            config.listen,
        )
    await server.start()
    if local is not None and in_process is not None:
        local[spec.name] = in_process
    await migrate(engine, spec.migrations_dir, spec.metadata)
    relay = None
    if spec.subscribers or spec.local_subscribers:
        relay = Relay(
            db,
            {
                **{dest: ingest_method(peers.channel(dest), name) for dest, name in spec.subscribers.items()},
                **(spec.local_subscribers(env) if spec.local_subscribers else {}),
            },
            poll_interval_s=config.relay_poll_s,
            retention=timedelta(seconds=config.outbox_retention_s),
        )
        relay.start()
    tasks: list[asyncio.Task[None]] = [
        asyncio.create_task(job()) for job in (spec.background(env) if spec.background else ())
    ]
    running = RunningService(server, health, db, peers, relay, tasks, port, local=in_process)
    tasks.append(asyncio.create_task(running.watch_readiness(names), name="readiness"))
    if config.metrics_listen:
        probes = [
            pool_probe(engine),
            *((outbox_probe(db),) if relay else ()),
            *(spec.probes(env) if spec.probes else ()),
        ]
        running.operations = await metrics.serve_http(config.metrics_listen, probes, running.ready)
    for name in ("", *names):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("%s serving on port %d (contract %s)", spec.name, port, CONTRACT_VERSION)
    return running


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
    """Process entry point: run ``spec`` until SIGTERM or SIGINT, then stop gracefully."""
    telemetry.setup_logging()
    config = ServiceConfig.from_env(spec.name, spec.all_peers())
    provider = telemetry.setup(spec.name, config.data_dir, config.otlp_endpoint)
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
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    finally:
        provider.shutdown()


def _run_loop(coro: Any) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency everywhere but Windows
        asyncio.run(coro)
    else:
        uvloop.run(coro)
