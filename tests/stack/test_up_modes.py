"""``reviewloop up`` in both modes: a review's whole life through the gateway, the services on Unix sockets.

Monolithic mode (``--target all``) runs every part in the one ``up`` process; microservices mode runs
each its own process. Either way, the services the command places itself listen on ``unix:`` sockets in
a directory only its user can enter, and a SIGTERM stops everything.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from stack.launcher import free_port
from stack.topology import GATEWAY, SERVICES

from tests.conftest import ADMIN_TOKEN, Databases, _pg_server, draft, production_trust
from tests.e2e.test_up import _children, _wait_for_line


async def _env(tmp_path: Path, databases: Databases, backend: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWLOOP_")}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env["REVIEWLOOP_GATEWAY_ADDR"] = f"127.0.0.1:{free_port()}"  # the services' are left to `up`
    for name in SERVICES:  # never the default ops ports, which another stack on this machine may hold
        env[f"REVIEWLOOP_{name.upper()}_METRICS_ADDR"] = f"127.0.0.1:{free_port()}"
    for name in (*SERVICES, GATEWAY):
        env[f"REVIEWLOOP_{name.upper()}_DB"] = await databases.url(backend, name)
    env.update(
        REVIEWLOOP_DATA_DIR=str(tmp_path / ".data"),
        REVIEWLOOP_ADMIN_TOKEN=ADMIN_TOKEN,
        REVIEWLOOP_RELAY_POLL_S="0.2",
        REVIEWLOOP_UNDO_WINDOW_S="0",  # the lifecycle reads the approval as sent at once
    )
    return env


def _lifecycle(gateway: str, data_dir: Path) -> None:
    """Submit, a human opens and approves, the agent sees the terminal nudge once; one message sent."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=f"http://{gateway}", timeout=30) as http:
        project = http.post("/v1/admin/projects", json={"name": "modes"}, headers=admin).json()

        def key(kind: str) -> dict[str, str]:
            issued = http.post(
                "/v1/admin/api-keys",
                json={"project_id": project["project_id"], "actor_kind": kind},
                headers=admin,
            )
            assert issued.status_code == 201, issued.text
            return {"Authorization": f"Bearer {issued.json()['api_key']}"}

        agent, human = key("agent"), key("human")
        marker = uuid.uuid4().hex
        sent = http.post("/v1/messages", json=draft(subject=f"modes {marker}"), headers=agent)
        assert sent.status_code == 202, sent.text
        review_id = sent.json()["review_id"]
        opened = http.post(f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human)
        assert opened.status_code == 200, opened.text
        approved = http.post(
            f"/v1/reviews/{review_id}/decision",
            json={"action": "approve", "revision": 1, "version": opened.json()["version"]},
            headers=human,
        )
        assert approved.status_code == 200, approved.text
        assert approved.json()["state"] == "sent"

        terminal: list[dict[str, object]] = []
        deadline = time.monotonic() + 20
        while not terminal:
            assert time.monotonic() < deadline, "the terminal nudge never reached the agent"
            waited = http.get("/v1/review-events/wait", params={"timeout_s": 2}, headers=agent)
            assert waited.status_code == 200, waited.text
            terminal = [
                e for e in waited.json()["events"] if e["review_id"] == review_id and e["reason"] == "sent"
            ]
        assert len(terminal) == 1
        acked = http.post(
            "/v1/review-events/ack",
            json={"acks": [{"review_id": review_id, "seq": terminal[0]["seq"]}]},
            headers=agent,
        )
        assert acked.status_code == 200, acked.text
        assert http.get("/v1/review-events", headers=agent).json()["events"] == []
    emls = [p for p in (data_dir / "outbox").glob("*.eml") if marker.encode() in p.read_bytes()]
    assert len(emls) == 1


def _up(tmp_path: Path, env: dict[str, str], *flags: str) -> None:
    """``reviewloop up`` with ``flags``: the services on private Unix sockets, a lifecycle, a clean SIGTERM."""
    up = subprocess.Popen(
        [sys.executable, "-m", "stack", "up", *flags],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = _wait_for_line(up, "Ctrl-C stops everything", 120)
        serving = [line.split() for line in lines if line.strip().endswith("SERVING")]
        assert [words[0] for words in serving] == list(SERVICES)
        for words in serving:
            assert words[2].startswith("unix:"), words
            sockets = Path(words[2].removeprefix("unix:")).parent
            assert stat.S_IMODE(sockets.stat().st_mode) == 0o700
        children = _children(up.pid)
        assert len(children) == (0 if "all" in flags else len(SERVICES) + 1)

        _lifecycle(env["REVIEWLOOP_GATEWAY_ADDR"], Path(env["REVIEWLOOP_DATA_DIR"]))

        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
        # One process, but each span still names the part whose work it was (the tracer flushed on stop).
        traces = Path(env["REVIEWLOOP_DATA_DIR"]) / "traces.jsonl"
        parts = {json.loads(line)["service"] for line in traces.read_text().splitlines()}
        assert {"gateway", "review_state", "nudge"} <= parts, parts
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


@pytest.mark.slow
async def test_monolithic_mode_runs_a_review_in_one_process(
    tmp_path: Path, databases: Databases, backend: str
) -> None:
    if backend == "postgres":
        _pg_server()
    _up(tmp_path, await _env(tmp_path, databases, backend), "--target", "all")


@pytest.mark.slow
async def test_microservices_mode_places_the_services_on_unix_sockets(
    tmp_path: Path, databases: Databases
) -> None:
    """Under the production trust settings too: mTLS and signed tokens over a Unix socket."""
    env = await _env(tmp_path, databases, "sqlite")
    env.update(production_trust(tmp_path / "pki"))
    _up(tmp_path, env)
