"""Trace sampling follows OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, parent-based across every hop.

A trace is kept or dropped whole: a child follows its parent's sampled flag whatever the ratio, over gRPC
metadata and over an outbox event's traceparent alike, and the relay's batch span follows its rows'.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from reviewloop.telemetry import (
    IDLE,
    KeepErrors,
    TelemetrySettings,
    context_from_traceparent,
    current_traceparent,
    sample_ratio,
    sampler,
)
from reviewloop.tracetree import sampling_notice


def _ratio(value: str) -> dict[str, str]:
    return {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": value}


@pytest.mark.parametrize(
    ("env", "ratio"),
    [
        ({}, 1.0),
        (_ratio("0.25"), 0.25),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}, 0.5),
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}, 1.0),
        ({"OTEL_TRACES_SAMPLER": "always_off"}, 0.0),
        ({"OTEL_TRACES_SAMPLER": "parentbased_always_on"}, 1.0),
    ],
)
def test_the_ratio_is_read_from_the_opentelemetry_variables(env: dict[str, str], ratio: float) -> None:
    assert sample_ratio(TelemetrySettings.from_env(env)) == ratio


@pytest.mark.parametrize(
    "env", [{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, _ratio("1.5"), _ratio("half")], ids=str
)
def test_an_unknown_sampler_or_a_ratio_outside_0_1_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="OTEL_TRACES_SAMPLER"):
        sample_ratio(TelemetrySettings.from_env(env))


def _tracer(env: dict[str, str]) -> tuple[trace.Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler(TelemetrySettings.from_env(env)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_new_traces_are_kept_at_the_ratio() -> None:
    tracer, exporter = _tracer(_ratio("0.25"))
    for _ in range(2000):
        with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER):
            pass
    assert 380 < len(exporter.get_finished_spans()) < 620


def _sampled(traceparent: str) -> bool:
    return bool(int(traceparent.rsplit("-", 1)[1], 16) & 1)


@pytest.mark.parametrize("sampled", [True, False])
def test_an_outbox_event_carries_its_trace_s_sampled_flag_and_the_relay_follows_it(sampled: bool) -> None:
    """The writer's decision, whatever ratio the relaying process runs at."""
    writer, _ = _tracer({"OTEL_TRACES_SAMPLER": "always_on" if sampled else "always_off"})
    with writer.start_as_current_span("submit", kind=trace.SpanKind.SERVER):
        traceparent = current_traceparent()  # what the outbox row stores
    assert _sampled(traceparent) is sampled

    relay, exported = _tracer({"OTEL_TRACES_SAMPLER": "always_off" if sampled else "always_on"})
    with relay.start_as_current_span("outbox.relay", context=context_from_traceparent(traceparent)):
        onward = current_traceparent()  # the Ingest call's metadata
    assert _sampled(onward) is sampled and onward.split("-")[1] == traceparent.split("-")[1]
    assert len(exported.get_finished_spans()) == (1 if sampled else 0)


@pytest.mark.parametrize(("sampled", "kept"), [([True, False], 1), ([False, False], 0)])
def test_the_relay_s_batch_span_is_kept_when_one_of_its_rows_traces_was(
    sampled: list[bool], kept: int
) -> None:
    tracer, exporter = _tracer(_ratio("0.5"))
    links = []
    for flag in sampled:
        row, _ = _tracer({"OTEL_TRACES_SAMPLER": "always_on" if flag else "always_off"})
        with row.start_as_current_span("submit", kind=trace.SpanKind.SERVER) as span:
            links.append(trace.Link(span.get_span_context()))
    for _ in range(20):
        with tracer.start_as_current_span("outbox.relay batch", links=links):
            pass
    assert len(exporter.get_finished_spans()) == 20 * kept


def test_traces_says_when_requests_were_not_sampled() -> None:
    assert sampling_notice({}) is None
    assert "25% of requests" in (sampling_notice(_ratio("0.25")) or "")
    assert "not sampled" in (sampling_notice({"OTEL_TRACES_SAMPLER": "always_off"}) or "")


def _keeping(env: dict[str, str], **bounds: Any) -> tuple[trace.Tracer, InMemorySpanExporter, KeepErrors]:
    """A process's tracer as ``telemetry.setup`` makes it: unsampled traces recorded, kept if they fail."""
    exporter = InMemorySpanExporter()
    keep = KeepErrors(SimpleSpanProcessor(exporter), **bounds)
    provider = TracerProvider(sampler=sampler(TelemetrySettings.from_env(env)))
    provider.add_span_processor(keep)
    return provider.get_tracer("test"), exporter, keep


def _request(tracer: trace.Tracer, fails: bool) -> str:
    """A request's spans: a statement, then a peer call that fails or not; returns its trace id."""
    with tracer.start_as_current_span("POST", kind=trace.SpanKind.SERVER) as root:
        with tracer.start_as_current_span("SELECT", kind=trace.SpanKind.CLIENT):
            pass
        with tracer.start_as_current_span(
            "/reviewloop.nudge.v1.Nudge/Ingest", kind=trace.SpanKind.CLIENT
        ) as call:
            if fails:
                call.set_status(Status(StatusCode.ERROR, "UNAVAILABLE"))
    return f"{root.get_span_context().trace_id:032x}"


def test_an_unsampled_trace_that_fails_is_exported_whole_and_one_that_succeeds_is_not() -> None:
    tracer, exporter, _ = _keeping(_ratio("0"))
    _request(tracer, fails=False)
    assert exporter.get_finished_spans() == ()
    failed = _request(tracer, fails=True)
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["/reviewloop.nudge.v1.Nudge/Ingest", "POST", "SELECT"]
    assert {f"{s.context.trace_id:032x}" for s in spans} == {failed}
    _request(tracer, fails=False)  # the failed trace's spans went, and nothing after it stays held
    assert len(exporter.get_finished_spans()) == 3


def test_a_service_keeps_its_spans_of_a_trace_that_fails_there_though_its_caller_did_not_sample_it() -> None:
    """The caller's decision crosses the hop as the unsampled traceparent; the error is decided here."""
    caller, _, _ = _keeping(_ratio("0"))
    with caller.start_as_current_span("POST", kind=trace.SpanKind.SERVER):
        traceparent = current_traceparent()
    assert not _sampled(traceparent)
    service, exported, _ = _keeping(_ratio("1"))  # this process's own ratio does not override the caller's
    for fails in (False, True):
        with service.start_as_current_span("Submit", context=context_from_traceparent(traceparent)) as span:
            with service.start_as_current_span("INSERT", kind=trace.SpanKind.CLIENT):
                pass
            if fails:
                span.set_status(Status(StatusCode.ERROR, "INTERNAL"))
        assert len(exported.get_finished_spans()) == (2 if fails else 0)


def test_an_idle_poll_records_nothing() -> None:
    tracer, exporter, keep = _keeping(_ratio("0"))
    with (
        tracer.start_as_current_span("SELECT", kind=trace.SpanKind.CLIENT) as poll,
        tracer.start_as_current_span("FETCH", kind=trace.SpanKind.CLIENT) as inner,
    ):
        inner.set_status(Status(StatusCode.ERROR))
    assert not poll.is_recording() and not inner.is_recording()
    idle = trace.set_span_in_context(
        trace.NonRecordingSpan(trace.SpanContext(1, 2, True, trace.TraceFlags(0), trace.TraceState([IDLE])))
    )
    with tracer.start_as_current_span("Ingest", context=idle, kind=trace.SpanKind.SERVER) as served:
        assert not served.is_recording()
    assert exporter.get_finished_spans() == () and not keep.held


def test_held_traces_are_bounded_in_number_and_age() -> None:
    now = [0.0]
    tracer, exporter, keep = _keeping(_ratio("0"), max_traces=2, max_age_s=10.0, clock=lambda: now[0])
    roots = [tracer.start_span(f"request {i}", kind=trace.SpanKind.SERVER) for i in range(3)]
    for root in roots:  # each root's child ends; the roots never do (a request that hangs)
        with tracer.start_as_current_span("SELECT", context=trace.set_span_in_context(root)):
            pass
    assert [t for t in keep.held] == [r.get_span_context().trace_id for r in roots[1:]]  # the oldest went
    now[0] = 11.0
    with tracer.start_as_current_span("SELECT", context=trace.set_span_in_context(roots[2])) as late:
        late.set_status(Status(StatusCode.ERROR))
    # request 1 aged out; request 2's held child went too, so only the failing span is exported
    assert [s.name for s in exporter.get_finished_spans()] == ["SELECT"]
    assert list(keep.held) == [roots[2].get_span_context().trace_id]


def test_in_one_process_a_part_s_trace_that_went_well_does_not_drop_its_caller_s_before_the_caller_fails() -> (
    None
):
    """Monolithic mode: the gateway and review_state share a process, and a trace crosses between them."""
    tracer, exporter, keep = _keeping(_ratio("0"))
    with tracer.start_as_current_span("POST", kind=trace.SpanKind.SERVER) as request:
        with tracer.start_as_current_span("SELECT api_keys", kind=trace.SpanKind.CLIENT):
            pass
        served = context_from_traceparent(current_traceparent())  # over the in-process channel
        with tracer.start_as_current_span("Submit", context=served, kind=trace.SpanKind.SERVER):
            pass
        request.set_status(Status(StatusCode.ERROR, "the answer did not fit"))
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["POST", "SELECT api_keys", "Submit"]
    assert not keep.held
