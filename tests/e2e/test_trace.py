"""One agent request is one trace across the gateway, review_state and (over the outbox) nudge."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from reviewloop.tracetree import read_spans
from stack.launcher import Stack

from tests.conftest import Api, Databases, draft, start_stack
from tests.e2e.helpers import events_until


async def test_cancel_is_one_trace_across_gateway_review_state_and_nudge(api: Api, stack: Stack) -> None:
    agent = await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    await api.http.post(f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent)
    await events_until(api, agent, 1)

    path = stack.data_dir / "traces.jsonl"

    def hops(in_trace: list[dict[str, Any]]) -> dict[str, bool]:
        """The spans the trace must hold; each process flushes its spans on its own schedule."""
        return {
            "gateway": any(s["service"] == "gateway" for s in in_trace),
            "review_state relay": any(
                s["service"] == "review_state" and s["name"].startswith("outbox.relay") for s in in_trace
            ),
            "nudge ingest": any(
                s["service"] == "nudge" and s["name"].endswith("NudgeService/Ingest") for s in in_trace
            ),
            # The SQLAlchemy instrumentation: each store statement is a span of the same trace.
            "review_state sql": any(
                s["service"] == "review_state" and "db.statement" in s["attributes"] for s in in_trace
            ),
        }

    deadline = time.monotonic() + 15
    while True:
        spans = list(read_spans(path))
        transitions = [
            s
            for s in spans
            if s["name"] == "review.transition" and s["attributes"].get("reviewloop.review_id") == review_id
        ]
        found = {"gateway": False}
        if transitions:
            found = hops([s for s in spans if s["trace_id"] == transitions[0]["trace_id"]])
        if (transitions and all(found.values())) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert transitions, "no review.transition span for the cancel"
    assert transitions[0]["attributes"]["to_state"] == "cancelled"
    assert transitions[0]["service"] == "review_state"
    assert found == {
        "gateway": True,
        "review_state relay": True,
        "nudge ingest": True,
        "review_state sql": True,
    }


async def _traces(stack: Stack, key: str, **env: str) -> tuple[int, list[str]]:
    environ = {**os.environ, "REVIEWLOOP_DATA_DIR": str(stack.data_dir), **env}
    if "OTEL_EXPORTER_OTLP_ENDPOINT" not in env:
        environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stack", "traces", key, env=environ, stdout=subprocess.PIPE
    )
    out = (await proc.communicate())[0].decode().splitlines()
    assert proc.returncode is not None
    return proc.returncode, out


async def test_traces_command_prints_the_reviews_whole_life_as_one_timeline(api: Api, stack: Stack) -> None:
    """Submit, cancel, the terminal nudge and its ack: one timeline of request trees, oldest first."""
    agent = await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    await api.http.post(f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent)
    events = await events_until(api, agent, 1)
    seq = max(e["seq"] for e in events if e.get("review_id") == review_id)
    acked = await api.http.post(
        "/v1/review-events/ack", json={"acks": [{"review_id": review_id, "seq": seq}]}, headers=agent
    )
    assert acked.status_code == 200, acked.text

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    def roots(lines: list[str]) -> list[str]:
        """The request tree each ``trace`` header opens, by its gateway root span."""
        return [
            lines[i + 1].strip().split("  ")[0]
            for i, line in enumerate(lines)
            if line.startswith("trace ") and i + 1 < len(lines)
        ]

    wanted = [
        "gateway: POST /v1/messages",
        "gateway: POST /v1/reviews/{review_id}/cancel",
        "gateway: POST /v1/review-events/ack",
    ]
    deadline = time.monotonic() + 15
    while True:
        code, lines = await _traces(stack, review_id)
        in_order = [r for r in roots(lines) if r in wanted]
        nudge_hop = any("nudge:" in line and "Ingest" in line for line in lines)
        if (in_order == wanted and nudge_hop) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert code == 0
    assert lines[0].startswith(f"review {review_id}: "), lines[0]
    # One tree per request, in the order they happened: the submit (queued, so it carries the review
    # id from its answer), the cancel, then the ack of the terminal nudge.
    assert in_order == wanted, "\n".join(lines)
    assert nudge_hop, "\n".join(lines)
    # Times: each tree's wall clock and offset from the first; each span's offset and duration.
    headers = [line for line in lines if line.startswith("trace ")]
    assert headers[0].endswith("+0.000s") and all("Z  +" in h for h in headers)
    transition = next(line for line in lines if "review_state: review.transition" in line)
    assert "from_state=needs_review" in transition and "to_state=cancelled" in transition
    assert indent(transition) > indent(next(line for line in lines if wanted[1] in line))


async def test_traces_command_says_so_when_traces_go_to_otlp(stack: Stack) -> None:
    code, lines = await _traces(stack, "rr_anything", OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4317")
    assert code == 2
    assert "OTLP" in lines[0] and "http://collector:4317" in lines[0]
    assert "reviewloop.review_id" in lines[0]


async def test_a_refused_request_is_an_error_span_with_its_problem_code(api: Api, stack: Stack) -> None:
    """A 404 and a 409 are ERROR on the gateway's span and on review_state's, with the problem code."""
    agent = await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    stale = await api.http.post(f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 7}, headers=agent)
    assert stale.status_code == 409, stale.text
    code = stale.json()["code"]
    missing = await api.http.get("/v1/reviews/rr_01M8XZ10T5D9FBBZ4TKKSSYRQZ", headers=agent)
    assert missing.status_code == 404

    path = stack.data_dir / "traces.jsonl"

    def servers() -> list[dict[str, Any]]:
        return [
            s
            for s in read_spans(path)
            if s["kind"] == "SERVER"
            and s["attributes"].get("problem_code") in (code, "not_found")
            and s["attributes"].get("reviewloop.review_id") in (review_id, "rr_01M8XZ10T5D9FBBZ4TKKSSYRQZ")
        ]

    deadline = time.monotonic() + 15
    while len({(s["service"], s["attributes"]["problem_code"]) for s in servers()}) < 4:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    found = {(s["service"], s["attributes"]["problem_code"], s["status"]) for s in servers()}
    assert found >= {
        ("gateway", code, "ERROR"),
        ("review_state", code, "ERROR"),
        ("gateway", "not_found", "ERROR"),
        ("review_state", "not_found", "ERROR"),
    }, found


async def test_an_idle_poll_records_no_span(api: Api, stack: Stack) -> None:
    """The relays poll every 0.2 s here and the sweeps run all along: none of it is a trace of its own.

    Every recorded root is a request (SERVER) or work reviewloop opened (INTERNAL: a delivery, a
    reconciliation), never a parentless store statement or connect (12 such traces a second before).
    """
    await api.http.get("/healthz")
    deadline = time.monotonic() + 15
    while True:  # each process flushes its spans on its own schedule
        roots = [s for s in read_spans(stack.data_dir / "traces.jsonl") if s["parent_span_id"] is None]
        if any(s["service"] == "gateway" for s in roots) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert roots, "the stack has recorded its requests"
    orphans = [(s["service"], s["name"]) for s in roots if s["kind"] == "CLIENT"]
    assert orphans == []


UNSAMPLED = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}


@pytest.fixture
async def unsampled_stack(databases: Databases, backend: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack that samples no trace (ratio 0), so only a request that fails leaves spans."""
    running = await start_stack(databases, backend, tmp_path, UNSAMPLED)
    yield running
    running.stop_all()


async def test_an_unsampled_request_that_fails_keeps_its_error_spans_and_one_that_succeeds_leaves_none(
    unsampled_stack: Stack,
) -> None:
    api = Api(unsampled_stack)
    try:
        agent = await api.agent()
        quiet = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
        failing = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
        stale = await api.http.post(
            f"/v1/reviews/{failing}/cancel", json={"parent_revision": 7}, headers=agent
        )
        assert stale.status_code == 409, stale.text
    finally:
        await api.http.aclose()

    path = unsampled_stack.data_dir / "traces.jsonl"

    def failed_parts() -> set[str]:
        """The parts that exported an ERROR span of the refused cancel (each flushes on its own schedule)."""
        return {
            s["service"]
            for s in read_spans(path)
            if s["status"] == "ERROR" and s["attributes"].get("reviewloop.review_id") == failing
        }

    deadline = time.monotonic() + 15
    while True:
        if failed_parts() == {"gateway", "review_state"} or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert failed_parts() == {"gateway", "review_state"}
    spans = list(read_spans(path))
    failed_trace = {s["trace_id"] for s in spans if s["status"] == "ERROR"}
    assert len(failed_trace) == 1
    # The refused cancel's whole tree in both parts (its statements too), and nothing of the submits,
    # which each part handled and exported before it.
    assert {s["trace_id"] for s in spans} == failed_trace
    assert any("db.statement" in s["attributes"] for s in spans if s["service"] == "review_state")
    assert not [s for s in spans if s["attributes"].get("reviewloop.review_id") == quiet]

    code, lines = await _traces(unsampled_stack, quiet, **UNSAMPLED)
    assert code == 1
    assert lines[0].startswith(f"no trace or review {quiet}")
    assert "not sampled" in lines[1] and "failed" in lines[1], lines
    code, lines = await _traces(unsampled_stack, failing, **UNSAMPLED)
    assert code == 0 and "gateway: POST /v1/reviews/{review_id}/cancel" in "\n".join(lines), lines
    assert "not sampled" in lines[-1], lines
