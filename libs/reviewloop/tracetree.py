"""``reviewloop traces``: a review's life (or one trace) as a timeline of request trees.

It reads the JSON-lines span file the embedded exporter writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

REVIEW_ID = "reviewloop.review_id"  # telemetry.REVIEW_ID; this reader loads no OpenTelemetry


def read_spans(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the span records of the JSON-lines file at ``path``; none when it does not exist yet."""
    if not path.exists():
        return
    with path.open("rb") as lines:
        for line in lines:
            if line.strip():
                yield orjson.loads(line)


def names_review(span: Mapping[str, Any], review_id: str) -> bool:
    """Whether ``span`` acts on ``review_id`` (an ack of several reviews carries a list)."""
    value = span["attributes"].get(REVIEW_ID)
    return value == review_id or (isinstance(value, list) and review_id in value)


def trace_ids_for(spans: list[dict[str, Any]], key: str) -> list[str]:
    """Trace ids that ``key`` names, oldest first.

    A trace id names itself; a review id names every trace with a span that acts on the review.
    """
    if any(s["trace_id"] == key for s in spans):
        return [key]
    starts: dict[str, int] = {}
    for span in spans:
        if names_review(span, key):
            starts.setdefault(span["trace_id"], span["start_ns"])
    for span in spans:
        if span["trace_id"] in starts:
            starts[span["trace_id"]] = min(starts[span["trace_id"]], span["start_ns"])
    return sorted(starts, key=starts.__getitem__)


def otlp_notice(env: Mapping[str, str]) -> str | None:
    """What to say when this process's traces go to an OTLP collector, not to the file."""
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint:
        return None
    return (
        f"traces are exported over OTLP to {endpoint}, not to a file: search your tracing backend for "
        f"the attribute {REVIEW_ID}=<review id> (unset OTEL_EXPORTER_OTLP_ENDPOINT to record "
        "traces.jsonl instead)"
    )


def sampling_notice(env: Mapping[str, str]) -> str | None:
    """What to say when traces are sampled (``OTEL_TRACES_SAMPLER``): a review's timeline may miss requests.

    Each agent request starts its own trace and is kept or dropped whole at the sampling ratio, so a
    review's timeline shows only its sampled requests, and the unsampled ones that failed (each process
    that saw the error kept its spans of the trace); an unsampled request that succeeded left no span.
    """
    from reviewloop.telemetry import TelemetrySettings, sample_ratio

    try:
        ratio = sample_ratio(TelemetrySettings.from_env(env))
    except ValueError as exc:
        return f"traces: {exc}"
    if ratio >= 1.0:
        return None
    if ratio == 0.0:
        return (
            "traces are not sampled (OTEL_TRACES_SAMPLER keeps none): only a request that failed left "
            "its spans, where it failed"
        )
    return (
        f"traces are sampled: {ratio:.0%} of requests are kept (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG); "
        "a request of this review that was not sampled is missing here, unless it failed"
    )


def _clock(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def print_trace(path: Path, key: str) -> int:
    """Print every trace ``key`` names as one timeline.

    Each request tree with its wall-clock start and offset from the first; spans with their offset,
    duration and status.

    Args:
        path: The JSON-lines span file.
        key: A trace id, or a review id that some span carries as ``reviewloop.review_id``.

    Returns:
        The command's exit status: 0, or 1 when no trace matches ``key``.
    """
    spans = list(read_spans(path))
    trace_ids = trace_ids_for(spans, key)
    if not trace_ids:
        print(f"no trace or review {key} in {path}")
        return 1
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        if span["trace_id"] in trace_ids:
            by_trace[span["trace_id"]].append(span)
    first = min(s["start_ns"] for members in by_trace.values() for s in members)
    if len(trace_ids) > 1 or trace_ids[0] != key:
        print(f"review {key}: {len(trace_ids)} request trees from {_clock(first)}")
    for trace_id in trace_ids:
        members = sorted(by_trace[trace_id], key=lambda s: s["start_ns"])
        start = members[0]["start_ns"]
        print(f"trace {trace_id}  {_clock(start)}  +{(start - first) / 1e9:.3f}s")
        print_tree(members, start)
    return 0


def _describe(span: Mapping[str, Any]) -> str:
    attrs = span["attributes"]
    extra = [
        f"{name}={attrs[name]}"
        for name in ("from_state", "to_state", "actor_kind", "problem_code")
        if attrs.get(name) not in (None, "")
    ]
    return f"  [{' '.join(extra)}]" if extra else ""


def print_tree(members: list[dict[str, Any]], start_ns: int | None = None) -> None:
    """Print the spans of one trace indented under their parents, with offset, duration and status.

    A span whose parent is not among ``members`` (recorded by a process that has not flushed yet) is
    printed as a root; siblings keep the order of ``members``.
    """
    origin = start_ns if start_ns is not None else min((s["start_ns"] for s in members), default=0)
    ids = {s["span_id"] for s in members}
    children: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for span in members:
        parent = span["parent_span_id"] if span["parent_span_id"] in ids else None
        children[parent].append(span)

    def walk(parent: str | None, depth: int) -> None:
        for span in children[parent]:
            ms = (span["end_ns"] - span["start_ns"]) / 1e6
            at = (span["start_ns"] - origin) / 1e6
            print(
                f"{'  ' * (depth + 1)}{span['service']}: {span['name']}  +{at:.1f} ms  {ms:.1f} ms  "
                f"{span['status']}{_describe(span)}"
            )
            walk(span["span_id"], depth + 1)

    walk(None, 0)
