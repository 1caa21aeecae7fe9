"""OpenTelemetry set-up, once per process.

OTLP export when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; otherwise spans are appended as JSON lines
to ``<data dir>/traces.jsonl``, which ``reviewloop traces`` reads back as a tree.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from reviewloop.contract import CONTRACT_VERSION

TRACES_FILE = "traces.jsonl"


class JsonLinesExporter(SpanExporter):
    """Appends one JSON object per span. O_APPEND keeps lines from several processes whole."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append ``spans`` as one write, so a batch's lines never interleave with another process's."""
        lines = b"".join(orjson.dumps(span_record(span)) + b"\n" for span in spans)
        with self._lock:
            os.write(self._fd, lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Close the file; the exporter cannot be used again."""
        with self._lock:
            os.close(self._fd)


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """The JSON-lines record of a finished span, as ``reviewloop traces`` reads it back.

    Ids are lowercase hex (trace id 32 digits, span id 16), times are epoch nanoseconds, and
    ``parent_span_id`` is ``None`` for a root span.
    """
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": {k: _plain(v) for k, v in (span.attributes or {}).items()},
    }


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def setup(service: str, data_dir: Path, otlp_endpoint: str | None) -> TracerProvider:
    """Install the process-wide tracer provider for ``service``; returns it so boot can flush it."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "service.version": CONTRACT_VERSION})
    )
    exporter: SpanExporter
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=otlp_endpoint)
    else:
        exporter = JsonLinesExporter(data_dir / TRACES_FILE)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    return provider


def current_traceparent() -> str:
    """The W3C traceparent of the active span, or ``""`` outside a trace."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent", "")


def context_from_traceparent(traceparent: str) -> Any:
    """A context whose parent is the span named by ``traceparent`` (for continuing a trace)."""
    carrier: Mapping[str, str] = {"traceparent": traceparent} if traceparent else {}
    return propagate.extract(carrier)


tracer = trace.get_tracer("reviewloop")
