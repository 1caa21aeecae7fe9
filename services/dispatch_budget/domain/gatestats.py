"""``gate-stats``: summarize a gates.jsonl decision log (spec 001 "Observability"). Pure."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from dispatch_budget.domain.gate import skips

CANDIDATE_THRESHOLDS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _field(record: Mapping[str, Any], camel: str, snake: str) -> Any:
    return record.get(camel, record.get(snake))


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Decision split, ``no``-confidence percentiles, fallback reasons, latency, and how many
    decisions each candidate ``confidentNo`` would have skipped (the log is replayable)."""
    rows = list(records)
    decisions = Counter(str(r.get("decision")) for r in rows)
    sources = Counter(str(r.get("source")) for r in rows)
    fallbacks = Counter(
        str(r["reason"]).removeprefix("fallback:").strip()
        for r in rows
        if str(r.get("reason", "")).startswith("fallback:")
    )
    no_conf = [
        float(r["confidence"])
        for r in rows
        if r.get("choice") == "no" and isinstance(r.get("confidence"), int | float)
    ]
    latencies = [
        float(_field(r, "latencyMs", "latency_ms"))
        for r in rows
        if r.get("source") == "classifier" and isinstance(_field(r, "latencyMs", "latency_ms"), int | float)
    ]
    return {
        "total": len(rows),
        "decisions": dict(decisions),
        "sources": dict(sources),
        "choices": dict(Counter(str(r["choice"]) for r in rows if r.get("choice"))),
        "no_confidence": {f"p{p}": percentile(no_conf, p) for p in (10, 25, 50, 75, 90)} if no_conf else {},
        "fallback_reasons": dict(fallbacks.most_common()),
        "latency_ms": (
            {
                "p50": percentile(latencies, 50),
                "p90": percentile(latencies, 90),
                "p99": percentile(latencies, 99),
                "max": max(latencies),
            }
            if latencies
            else {}
        ),
        # Replayed through the gate's own rule, so a candidate reports what the gate would do: at
        # confidentNo = 1 the gate only observes, so it would skip nothing.
        "would_skip": {str(t): sum(skips("no", c, t) for c in no_conf) for t in CANDIDATE_THRESHOLDS},
    }


def render(summary: Mapping[str, Any]) -> str:
    total = summary["total"]
    lines = [f"decisions: {total}"]
    for name, count in sorted(summary["decisions"].items()):
        lines.append(f"  {name:<10} {count:>6}  {100 * count / total:5.1f}%")
    lines.append("sources: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["sources"].items())))
    if summary["choices"]:
        lines.append("choices: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["choices"].items())))
    if summary["no_confidence"]:
        lines.append(
            "no-confidence: " + "  ".join(f"{k} {v:.2f}" for k, v in summary["no_confidence"].items())
        )
    else:
        lines.append("no-confidence: (no 'no' answers)")
    lines.append("fallback reasons:" + ("" if summary["fallback_reasons"] else " none"))
    for reason, count in summary["fallback_reasons"].items():
        lines.append(f"  {reason:<40} {count:>6}")
    if summary["latency_ms"]:
        lines.append("latency ms: " + "  ".join(f"{k} {v:.0f}" for k, v in summary["latency_ms"].items()))
    lines.append("confidentNo  would skip")
    for threshold, count in summary["would_skip"].items():
        lines.append(f"  {float(threshold):<10.2f} {count:>6}")
    return "\n".join(lines)
