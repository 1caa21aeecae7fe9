"""One agent request is one trace across the gateway, review_state and (over the outbox) nudge."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

from reviewloop.tracetree import read_spans
from stack.launcher import Stack

from tests.conftest import Api, draft
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


async def test_traces_command_prints_the_review_as_a_tree(api: Api, stack: Stack) -> None:
    agent = await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    await api.http.post(f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent)
    await events_until(api, agent, 1)
    env = {**os.environ, "REVIEWLOOP_DATA_DIR": str(stack.data_dir)}

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    def nested(lines: list[str]) -> bool:
        """The nudge hop printed below the gateway's root span (each process flushes its spans on
        its own schedule, so until the relay's span lands the nudge hop has no parent to sit under)."""
        roots = [i for i, line in enumerate(lines) if "gateway: POST /v1/reviews/{review_id}/cancel" in line]
        hops = [line for line in lines[roots[0] :] if "nudge:" in line] if roots else []
        return bool(hops) and indent(hops[0]) > indent(lines[roots[0]])

    deadline = time.monotonic() + 15
    while True:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "stack", "traces", review_id, env=env, stdout=subprocess.PIPE
        )
        lines = (await proc.communicate())[0].decode().splitlines()
        if nested(lines) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert proc.returncode == 0
    assert lines[0].startswith("trace ")
    transition = next(line for line in lines if "review_state: review.transition" in line)
    # Children are indented under their parents: the nudge hop sits below the gateway's root span.
    assert nested(lines), "\n".join(lines)
    assert transition
