"""Metrics: OpenTelemetry instruments, read out in the Prometheus text format, once per process.

Rates, errors and latencies are histograms recorded where a request ends (the gRPC boundary, the
gateway's middleware). Backlogs and ages are observable gauges whose values a scrape reads from the
store: ``scrape()`` first awaits every registered ``Probe`` (a few aggregate queries), then renders,
so the gauges are as fresh as the scrape and cost nothing between scrapes.

Names are listed in docs/operations.md. Without ``setup()`` (tests that start a service in-process)
every instrument is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import Span, StatusCode

from reviewloop.contract import CONTRACT_VERSION

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# name -> (unit, description) of every gauge a probe may report.
GAUGES: Mapping[str, tuple[str, str]] = {
    "reviewloop.outbox.backlog": ("{event}", "Undelivered outbox rows, per destination."),
    "reviewloop.outbox.oldest_age": ("s", "Age of the oldest undelivered outbox row, per destination."),
    "reviewloop.outbox.retrying": ("{event}", "Undelivered outbox rows a receiver refused at least once."),
    "reviewloop.outbox.dead_letters": (
        "{event}",
        "Events a receiver refused for good, set aside, per destination.",
    ),
    "reviewloop.nudge.backlog": ("{nudge}", "Un-acked nudges, per project."),
    "reviewloop.nudge.oldest_unacked_age": ("s", "Age of the oldest un-acked nudge, per project."),
    "reviewloop.delivery.attempts": (
        "{attempt}",
        "Delivery attempts by outcome (in_flight, delivered, refused).",
    ),
    "reviewloop.delivery.parked": (
        "{attempt}",
        "Sends parked for reconciliation (in flight past the cut-off).",
    ),
    "reviewloop.delivery.parked_oldest_age": ("s", "Age of the oldest parked send."),
    "reviewloop.budget.admissions": (
        "{admission}",
        "Reviewer-round admissions by outcome (unsettled, counted, no_verdict).",
    ),
    "reviewloop.budget.launch_refusals": ("{refusal}", "Automatic launches the no-verdict cap refused."),
    "reviewloop.budget.gate_decisions": ("{decision}", "Review-run gate decisions recorded, by source."),
    "reviewloop.gateway.event_streams": ("{stream}", "Open review-event streams (SSE) on this gateway."),
    "db.client.connections.usage": ("connections", "Connections of the store's pool, used and idle."),
    "reviewloop.gateway.event_feeds": (
        "{feed}",
        "Reads of the nudge service those streams share: one per project with a stream open here.",
    ),
}

Point = tuple[float, Mapping[str, str]]
# A probe answers some of the GAUGES from the store: gauge name -> its points.
Probe = Callable[[], Awaitable[Mapping[str, Sequence[Point]]]]

_provider: MeterProvider | None = None
_snapshot: dict[str, Sequence[Point]] = {}
_meter = metrics.get_meter("reviewloop")


def setup(service: str) -> MeterProvider:
    """Install the process-wide meter provider for ``service``, read out by ``scrape()``."""
    global _provider
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    _provider = MeterProvider(
        resource=Resource.create({"service.name": service, "service.version": CONTRACT_VERSION}),
        metric_readers=[PrometheusMetricReader()],
    )
    metrics.set_meter_provider(_provider)
    return _provider


def _gauge_callback(name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, dict(attrs)) for value, attrs in _snapshot.get(name, ())]

    return observe


for _name, (_unit, _description) in GAUGES.items():
    _meter.create_observable_gauge(_name, [_gauge_callback(_name)], unit=_unit, description=_description)

# Seconds, from a fast read (a few ms) to a long-poll's ceiling (60 s).
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
rpc_duration = _meter.create_histogram(
    "reviewloop.rpc.server.duration",
    unit="s",
    description="gRPC calls served, by method, status and problem code (rate, errors and latency).",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
)
http_duration = _meter.create_histogram(
    "reviewloop.http.server.duration",
    unit="s",
    description="Gateway requests served, by method, route, status and problem code.",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
)
transitions = _meter.create_counter(
    "reviewloop.review.transitions",
    unit="{transition}",
    description="Review state changes, by from/to state.",
)
scrape_duration = _meter.create_histogram(
    "reviewloop.metrics.scrape.duration",
    unit="s",
    description="Time the store probes of a scrape took.",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
)


async def scrape(probes: Sequence[Probe]) -> bytes:
    """Refresh the gauges from ``probes`` (one failing probe leaves its gauges out), then render."""
    from prometheus_client import REGISTRY, generate_latest

    started = time.perf_counter()
    fresh: dict[str, Sequence[Point]] = {}
    for result in await asyncio.gather(*(probe() for probe in probes), return_exceptions=True):
        if isinstance(result, BaseException):
            log.warning("a metrics probe failed: %s", result)
            continue
        fresh.update(result)
    _snapshot.clear()
    _snapshot.update(fresh)
    scrape_duration.record(time.perf_counter() - started)
    return generate_latest(REGISTRY)


def record_rpc(method: str, status: str, code: str, seconds: float) -> None:
    """One gRPC call served: ``status`` is the gRPC status name, ``code`` the problem code or ""."""
    rpc_duration.record(seconds, {"rpc.method": method, "rpc.grpc.status": status, "problem_code": code})


@dataclass(frozen=True)
class TransitionCounter(SpanProcessor):
    """Counts each ``review.transition`` span that ended without error: a committed state change."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing happens at the start of a span."""

    def on_end(self, span: ReadableSpan) -> None:
        """Count a successful transition by its from/to state."""
        if span.name != "review.transition" or span.status.status_code is StatusCode.ERROR:
            return
        attrs: Mapping[str, Any] = span.attributes or {}
        transitions.add(
            1, {"from_state": str(attrs.get("from_state")), "to_state": str(attrs.get("to_state"))}
        )

    def shutdown(self) -> None:
        """Nothing to flush."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing to flush."""
        return True


async def serve_http(
    listen: str, probes: Sequence[Probe], ready: Callable[[], Awaitable[bool]]
) -> asyncio.AbstractServer:
    """A minimal HTTP endpoint beside a gRPC service: ``/metrics``, ``/livez`` and ``/readyz``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await reader.readline()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else ""
            status, body, kind = 404, b"not found\n", "text/plain"
            if path == "/metrics":
                status, body, kind = 200, await scrape(probes), CONTENT_TYPE
            elif path == "/livez":
                status, body = 200, b"ok\n"
            elif path == "/readyz":
                is_ready = await ready()
                status, body = (200, b"ok\n") if is_ready else (503, b"not ready\n")
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    host, _, port = listen.rpartition(":")
    return await asyncio.start_server(handle, host or None, int(port), reuse_address=True)
