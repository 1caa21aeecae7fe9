"""``reviewloop traces``: read the JSON-lines span file and print one trace as a tree."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson


def read_spans(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the span records of the JSON-lines file at ``path``; none when it does not exist yet."""
    if not path.exists():
        return
    with path.open("rb") as lines:
        for line in lines:
            if line.strip():
                yield orjson.loads(line)


def trace_ids_for(spans: list[dict[str, Any]], key: str) -> list[str]:
    """Trace ids that ``key`` names: a trace id itself, or a review id any span carries."""
    if any(s["trace_id"] == key for s in spans):
        return [key]
    found = {s["trace_id"]: None for s in spans if s["attributes"].get("reviewloop.review_id") == key}
    return list(found)


def print_trace(path: Path, key: str) -> int:
    """Print every trace ``key`` names, each as a tree of its spans.

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
    for trace_id in trace_ids:
        print(f"trace {trace_id}")
        print_tree(sorted((s for s in spans if s["trace_id"] == trace_id), key=lambda s: s["start_ns"]))
    return 0


def print_tree(members: list[dict[str, Any]]) -> None:
    """Print the spans of one trace indented under their parents, with duration and status.

    A span whose parent is not among ``members`` (recorded by a process that has not flushed yet) is
    printed as a root; siblings keep the order of ``members``.
    """
    ids = {s["span_id"] for s in members}
    children: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for span in members:
        parent = span["parent_span_id"] if span["parent_span_id"] in ids else None
        children[parent].append(span)

    def walk(parent: str | None, depth: int) -> None:
        for span in children[parent]:
            ms = (span["end_ns"] - span["start_ns"]) / 1e6
            print(f"{'  ' * (depth + 1)}{span['service']}: {span['name']}  {ms:.1f} ms  {span['status']}")
            walk(span["span_id"], depth + 1)

    walk(None, 0)
