"""Trace sampling follows OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, parent-based across every hop.

A trace is kept or dropped whole: a child follows its parent's sampled flag whatever the ratio, over gRPC
metadata and over an outbox event's traceparent alike, and the relay's batch span follows its rows'.
"""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from reviewloop.telemetry import context_from_traceparent, current_traceparent, sample_ratio, sampler
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
    assert sample_ratio(env) == ratio


@pytest.mark.parametrize(
    "env", [{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, _ratio("1.5"), _ratio("half")], ids=str
)
def test_an_unknown_sampler_or_a_ratio_outside_0_1_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="OTEL_TRACES_SAMPLER"):
        sample_ratio(env)


def _tracer(env: dict[str, str]) -> tuple[trace.Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler(env))
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
