"""OpenTelemetry set-up, once per process.

OTLP export when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; otherwise spans are appended as JSON lines
to ``<data dir>/traces.jsonl``, which ``reviewloop traces`` reads back as a timeline.

A trace starts only where work starts: a request (a SERVER span) or a span reviewloop opens itself
(an outbox delivery, a sweep that found something). A store statement or a peer call made outside any
span (an idle relay or sweep polling) is not sampled, so an idle stack exports nothing.

A trace the ratio does not sample is still recorded, not exported: each process holds its spans
(``KeepErrors``) and exports them only if one of them ends in an error, so the trace that failed is never
the one dropped.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import Attributes

from reviewloop.common.v1 import common_pb2
from reviewloop.contract import CONTRACT_VERSION
from reviewloop.files import private_dir
from reviewloop.settings import Settings, Text, variable

TRACES_FILE = "traces.jsonl"

# Span attribute names (docs/operations.md lists them with the spans that carry them).
REVIEW_ID = "reviewloop.review_id"
CATEGORY_ID = "category_id"
ACTOR_KIND = "actor_kind"
FROM_STATE = "from_state"
TO_STATE = "to_state"
PROBLEM_CODE = "problem_code"


class JsonLinesExporter(SpanExporter):
    """Appends one JSON object per span. O_APPEND keeps lines from several processes whole."""

    def __init__(self, path: Path) -> None:
        private_dir(path.parent)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
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


# In monolithic mode every part shares one process and one tracer provider (one resource): a span names
# the part that made it in this attribute, set from ``current_part`` when it starts (``PartSpans``).
PART = "reviewloop.part"
current_part: contextvars.ContextVar[str | None] = contextvars.ContextVar("reviewloop_part", default=None)


class PartSpans(SpanProcessor):
    """Stamp each span with the part whose work it is (``current_part``), when one is set."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Set ``PART`` on a span started inside a part's context."""
        if part := current_part.get():
            span.set_attribute(PART, part)


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
        "service": (span.attributes or {}).get(PART) or span.resource.attributes.get("service.name"),
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": {k: _plain(v) for k, v in (span.attributes or {}).items()},
    }


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# The tracestate entry of a call made outside any trace (an idle relay or sweep polling its peer): its
# server records nothing, where a request's unsampled trace is recorded in case it fails (``KeepErrors``).
IDLE = ("reviewloop", "idle")


class WorkRoots(Sampler):
    """Sample a root span only if it starts work, and then at ``ratio`` (by trace id).

    Never a CLIENT span (a store statement, a peer call) without a parent: an idle relay or sweep's poll.
    A root the ratio leaves out is recorded (``RECORD_ONLY``), for ``KeepErrors`` to export if it fails.
    The ratio reads the trace id alone, so every process makes the same decision for a trace.
    """

    def __init__(self, ratio: float = 1.0) -> None:
        self.ratio = ratio
        self._ratio = TraceIdRatioBased(ratio)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        """Drop a parentless CLIENT span; record every other root."""
        if kind is SpanKind.CLIENT:
            return SamplingResult(Decision.DROP)
        if links:
            # A span that carries other traces' work (the relay's batch, linked to each row's trace) is kept
            # when one of them was, and dropped with them: the outbox hop follows their sampled flags.
            keep = any(link.context.trace_flags.sampled for link in links)
            return SamplingResult(Decision.RECORD_AND_SAMPLE if keep else Decision.RECORD_ONLY, attributes)
        sampler = ALWAYS_ON if self.ratio >= 1.0 else self._ratio
        result = sampler.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        if result.decision is Decision.DROP:
            return SamplingResult(Decision.RECORD_ONLY, attributes, result.trace_state)
        return result

    def get_description(self) -> str:
        """The sampler's name in diagnostics."""
        return f"WorkRoots{{{self.ratio}}}"


class UnsampledParent(Sampler):
    """Record a child of an unsampled trace (not export it) unless that trace is an idle poll's.

    An idle poll's: a remote parent whose tracestate says ``IDLE``, or a local parent recorded nothing.
    """

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        """``RECORD_ONLY`` under a request's unsampled trace, ``DROP`` under an idle poll."""
        parent = trace.get_current_span(parent_context)
        ctx = parent.get_span_context()
        idle = ctx.trace_state.get(IDLE[0]) == IDLE[1] if ctx.is_remote else not parent.is_recording()
        decision = Decision.DROP if idle else Decision.RECORD_ONLY
        return SamplingResult(decision, attributes if not idle else None, ctx.trace_state)

    def get_description(self) -> str:
        """The sampler's name in diagnostics."""
        return "UnsampledParent"


def _parent_based(root: Sampler) -> Sampler:
    unsampled = UnsampledParent()
    return ParentBased(root=root, remote_parent_not_sampled=unsampled, local_parent_not_sampled=unsampled)


SAMPLER = _parent_based(WorkRoots())

# OTEL_TRACES_SAMPLER values and the ratio of new traces each keeps. Every one follows the parent's
# decision (the traceparent's sampled flag, carried by gRPC metadata and by each outbox event), so a
# trace is kept or dropped whole across every hop; the plain names are read as their parent-based twins.
_SAMPLERS = {
    "always_on": 1.0,
    "parentbased_always_on": 1.0,
    "always_off": 0.0,
    "parentbased_always_off": 0.0,
    "traceidratio": None,
    "parentbased_traceidratio": None,
}


class TelemetrySettings(Settings):
    """What a process's traces and logs read (every process: the services, the gateway, the launcher)."""

    traces_sampler: Text = variable(
        "OTEL_TRACES_SAMPLER",
        None,
        "Sample new traces: `parentbased_traceidratio` with a ratio, or `always_off`; every part follows its "
        "parent's decision, over gRPC and the outbox alike (docs/operations.md, Traces). Unset: every trace",
        unset="unset: every trace",
    )
    traces_sampler_arg: Text = variable("OTEL_TRACES_SAMPLER_ARG", None, "The ratio sampler's ratio (`0.1`)")
    log_format: Literal["json", "text"] = variable(
        "REVIEWLOOP_LOG_FORMAT",
        "json",
        "`json` (one JSON object per line, with trace, span and review ids; the gateway's access log too) or `text`",
    )


def sample_ratio(read: TelemetrySettings) -> float:
    """The share of new traces kept: ``OTEL_TRACES_SAMPLER`` and ``_ARG`` as the process's settings read them.

    Unset: every trace (``parentbased_always_on``). A ratio sampler without an argument keeps every trace,
    as the OpenTelemetry SDKs do.

    Raises:
        ValueError: an unknown sampler, or a ratio outside 0..1.
    """
    name = (read.traces_sampler or "").strip().lower() or "parentbased_always_on"
    if name not in _SAMPLERS:
        raise ValueError(f"OTEL_TRACES_SAMPLER={name!r} is not one of {', '.join(sorted(_SAMPLERS))}")
    fixed = _SAMPLERS[name]
    if fixed is not None:
        return fixed
    arg = (read.traces_sampler_arg or "").strip() or "1.0"
    try:
        ratio = float(arg)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not a ratio between 0 and 1")
    return ratio


def sampler(read: TelemetrySettings) -> Sampler:
    """The process's sampler: the parent's decision, else ``WorkRoots`` at ``sample_ratio(read)``."""
    return _parent_based(WorkRoots(sample_ratio(read)))


class _Held:
    __slots__ = ("failed", "open", "since", "spans")

    def __init__(self, since: float) -> None:
        self.since, self.failed, self.open, self.spans = since, False, 0, list[ReadableSpan]()


class KeepErrors(SpanProcessor):
    """Pass sampled spans on to ``export``; hold a recorded, unsampled trace's until it fails or ends.

    A span of an unsampled trace that ends with an ERROR status sends on every span of that trace this
    process holds, and every later one until the trace's local roots end; when the last open one ends
    with no error, they are dropped (a local root: no parent, or a remote one; in monolithic mode a
    request's trace has one per part it crossed, nested). Bounded: at most ``max_traces`` traces (the oldest goes first), ``max_spans`` spans
    each, and a trace held past ``max_age_s`` (a root that never ended) is let go; ``clock`` is injected so
    a test decides what time it is.
    """

    def __init__(
        self,
        export: SpanProcessor,
        max_traces: int = 1024,
        max_spans: int = 512,
        max_age_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.export = export
        self.max_traces, self.max_spans, self.max_age_s, self.clock = max_traces, max_spans, max_age_s, clock
        self.held: OrderedDict[int, _Held] = OrderedDict()
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Count an unsampled trace's local root open; pass the start on to the exporting processor."""
        ctx = span.context
        if ctx is not None and not ctx.trace_flags.sampled and _local_root(span):
            with self._lock:
                self._entry(ctx.trace_id).open += 1
        self.export.on_start(span, parent_context)

    def _entry(self, trace_id: int) -> _Held:
        """The trace's holding, made if new; those past ``max_age_s`` or over ``max_traces`` let go first."""
        now = self.clock()
        while self.held and next(iter(self.held.values())).since + self.max_age_s < now:
            self.held.popitem(last=False)
        held = self.held.get(trace_id)
        if held is None:
            if len(self.held) >= self.max_traces:
                self.held.popitem(last=False)
            held = self.held[trace_id] = _Held(now)
        return held

    def on_end(self, span: ReadableSpan) -> None:
        """Send ``span`` on, hold it, or drop its trace's held spans (see the class)."""
        ctx = span.context
        if ctx is None or ctx.trace_flags.sampled:
            self.export.on_end(span)
            return
        with self._lock:
            held = self._entry(ctx.trace_id)
            send = []
            if span.status.status_code is StatusCode.ERROR and not held.failed:
                held.failed, send, held.spans = True, held.spans, []
            if held.failed:
                send.append(span)
            elif len(held.spans) < self.max_spans:
                held.spans.append(span)
            if _local_root(span):
                held.open -= 1
                if held.open <= 0:  # this process's part of the trace is over
                    del self.held[ctx.trace_id]
        for kept in send:
            self.export.on_end(_sampled(kept))

    def shutdown(self) -> None:
        """Shut the exporting processor down."""
        self.export.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush what was sent on (held spans wait for their trace)."""
        return self.export.force_flush(timeout_millis)


def _local_root(span: ReadableSpan) -> bool:
    return span.parent is None or span.parent.is_remote


def _sampled(span: ReadableSpan) -> ReadableSpan:
    """``span`` as a sampled one: an exporting processor passes only those (a kept trace is sampled now)."""
    ctx = span.context
    assert ctx is not None
    return ReadableSpan(
        name=span.name,
        context=SpanContext(
            ctx.trace_id, ctx.span_id, ctx.is_remote, TraceFlags(TraceFlags.SAMPLED), ctx.trace_state
        ),
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def setup(service: str, data_dir: Path, otlp_endpoint: str | None, read: TelemetrySettings) -> TracerProvider:
    """Install the process-wide tracer provider, sampling as its settings say; returns it to flush."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "service.version": CONTRACT_VERSION}),
        sampler=sampler(read),
    )
    exporter: SpanExporter
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=otlp_endpoint)
    else:
        exporter = JsonLinesExporter(data_dir / TRACES_FILE)
    provider.add_span_processor(KeepErrors(BatchSpanProcessor(exporter, schedule_delay_millis=200)))
    from reviewloop.metrics import TransitionCounter

    provider.add_span_processor(TransitionCounter())
    provider.add_span_processor(PartSpans())
    trace.set_tracer_provider(provider)
    return provider


class JsonLogFormatter(logging.Formatter):
    """One JSON object per log line.

    With the trace and span ids (and the review id) of the active span, so a line leads to its trace.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            line["trace_id"], line["span_id"] = f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
            review_id = getattr(trace.get_current_span(), "attributes", {}).get(REVIEW_ID)
            if review_id:
                line[REVIEW_ID] = review_id
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def setup_logging(level: int = logging.INFO) -> None:
    """Log JSON lines to stderr (``REVIEWLOOP_LOG_FORMAT=text`` for the plain format)."""
    handler = logging.StreamHandler()
    if TelemetrySettings.from_env(os.environ).log_format == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)


def current_traceparent() -> str:
    """The W3C traceparent of the active span, or ``""`` outside a trace."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent", "")


def context_from_traceparent(traceparent: str) -> Any:
    """A context whose parent is the span named by ``traceparent`` (for continuing a trace)."""
    carrier: Mapping[str, str] = {"traceparent": traceparent} if traceparent else {}
    return propagate.extract(carrier)


def review_attributes(message: Any) -> dict[str, Any]:
    """The review attributes a request or an answer names.

    ``reviewloop.review_id`` (from ``review_id``, ``review.id``, the ``review_id`` of repeated items such
    as acks, or a review event's ``aggregate_id``; a list when there are several), ``category_id`` and the
    principal's ``actor_kind``.
    """
    found: dict[str, Any] = {}
    fields = message.DESCRIPTOR.fields_by_name
    review_ids: list[str] = []
    if "review_id" in fields and (value := message.review_id):
        review_ids.append(value)
    # An event about a review (a dead letter retried or discarded, say) names it as its aggregate.
    if "aggregate_id" in fields and message.aggregate_id.startswith("rr_"):
        review_ids.append(message.aggregate_id)
    if "review" in fields and message.HasField("review"):
        review = message.review
        review_ids.append(review.id)
        # A review summary (the reviewer's decision answer) carries no category.
        if "category_id" in review.DESCRIPTOR.fields_by_name and review.category_id:
            found[CATEGORY_ID] = review.category_id
    for name in ("acks", "events"):
        if name in fields and fields[name].message_type is not None:
            for item in getattr(message, name):
                item_fields = item.DESCRIPTOR.fields_by_name
                if "review_id" in item_fields and item.review_id:
                    review_ids.append(item.review_id)
                elif (
                    name == "events" and "aggregate_id" in item_fields and item.aggregate_id.startswith("rr_")
                ):
                    review_ids.append(item.aggregate_id)
    unique = list(dict.fromkeys(review_ids))
    if unique:
        found[REVIEW_ID] = unique[0] if len(unique) == 1 else unique
    if "category_id" in fields and (value := message.category_id):
        found[CATEGORY_ID] = value
    if "principal" in fields and message.HasField("principal"):
        kind = common_pb2.ActorKind.Name(message.principal.actor_kind)
        found[ACTOR_KIND] = kind.removeprefix("ACTOR_KIND_").lower()
    return found


def mark_error(code: str, description: str = "", span: trace.Span | None = None) -> None:
    """Record on ``span``, the active one by default, that it failed with problem ``code`` (4xx or 5xx)."""
    span = span or trace.get_current_span()
    span.set_attribute(PROBLEM_CODE, code)
    span.set_status(Status(StatusCode.ERROR, description or code))


tracer = trace.get_tracer("reviewloop")
