"""``reviewloop up``: everything SERVING, the slice over real HTTP, SIGTERM leaves no child behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from reviewloop.review.v1 import review_pb2, review_pb2_grpc
from stack.launcher import ALL, free_port
from stack.topology import GATEWAY, SERVICES

from tests.conftest import draft
from tests.reviewloop.test_trust import make_pki


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWLOOP_")}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    for name in ALL:
        env[f"REVIEWLOOP_{name.upper()}_ADDR"] = f"127.0.0.1:{free_port()}"
    for name in SERVICES:  # never the default ops ports, which another stack on this machine may hold
        env[f"REVIEWLOOP_{name.upper()}_METRICS_ADDR"] = f"127.0.0.1:{free_port()}"
    env["REVIEWLOOP_DATA_DIR"] = str(tmp_path / ".data")
    return env


def _wait_for_line(proc: subprocess.Popen[str], needle: str, timeout_s: float) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"never printed {needle!r}: {lines}")


@pytest.mark.slow
def test_up_serves_the_slice_and_sigterm_stops_every_child(tmp_path: Path) -> None:
    _up_serves_the_slice(tmp_path, _env(tmp_path))


def _up_serves_the_slice(tmp_path: Path, env: dict[str, str], *flags: str) -> list[str]:
    """Run ``reviewloop up``, a lifecycle through it, then SIGTERM; answers what it printed."""
    up = subprocess.Popen(
        [sys.executable, "-m", "stack", "up", *flags],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = _wait_for_line(up, "Ctrl-C stops everything", 90)
        gateway = env[f"REVIEWLOOP_{GATEWAY.upper()}_ADDR"]
        assert any(f"http://{gateway}" in line for line in lines)
        assert sum("SERVING" in line for line in lines) == 5
        token_file = tmp_path / ".data" / "admin-token"
        assert any(str(token_file) in line for line in lines)
        children = _children(up.pid)
        assert len(children) == len(ALL)

        admin = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
        with httpx.Client(timeout=30) as ops:  # every service's ops port, printed beside its gRPC address
            for name in SERVICES:
                where = env[f"REVIEWLOOP_{name.upper()}_METRICS_ADDR"]
                assert any(name in line and f"ops http://{where} " in line for line in lines), name
                for path in ("/livez", "/readyz", "/metrics"):
                    assert ops.get(f"http://{where}{path}").status_code == 200, (name, path)
        with httpx.Client(base_url=f"http://{gateway}", timeout=30) as http:
            assert http.get("/healthz").json()["status"] == "ok"
            project = http.post("/v1/admin/projects", json={"name": "up"}, headers=admin).json()
            key = http.post(
                "/v1/admin/api-keys",
                json={"project_id": project["project_id"], "actor_kind": "agent"},
                headers=admin,
            ).json()
            agent = {"Authorization": f"Bearer {key['api_key']}"}
            sent = http.post("/v1/messages", json=draft(), headers=agent)
            assert sent.status_code == 202
            review_id = sent.json()["review_id"]
            assert (
                http.post(
                    f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
                ).json()["state"]
                == "cancelled"
            )
            deadline = time.monotonic() + 15
            while not (events := http.get("/v1/review-events", headers=agent).json()["events"]):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert events[0]["reason"] == "cancelled"
            # The pushed stream too: under the production trust settings it once answered 200 and never
            # sent an event (issue 36).
            with http.stream("GET", "/v1/review-events/stream", headers=agent) as stream:
                data = next(line for line in stream.iter_lines() if line.startswith("data:"))
            assert '"reason":"cancelled"' in data, data
        if "--tls-ca" in flags:
            _plaintext_is_refused(env["REVIEWLOOP_REVIEW_STATE_ADDR"], review_id)

        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
        assert not [pid for pid in children if _alive(pid)]
        return lines
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


def _plaintext_is_refused(address: str, review_id: str) -> None:
    """A process that reaches a service's port without a certificate from the CA gets nothing."""

    async def call() -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(address) as channel:
            try:
                await review_pb2_grpc.ReviewStateServiceStub(channel).GetReview(
                    review_pb2.GetReviewRequest(review_id=review_id), timeout=5
                )
            except grpc.aio.AioRpcError as error:
                return error.code()
        return grpc.StatusCode.OK

    assert asyncio.run(call()) == grpc.StatusCode.UNAVAILABLE


@pytest.mark.slow
def test_up_with_the_production_trust_settings_runs_a_lifecycle_streams_and_refuses_a_plaintext_caller(
    tmp_path: Path,
) -> None:
    """The certificates given as flags reach every part and the gateway's clients; every hop (gateway to
    services, the relays, the launcher's health checks) goes over mTLS."""
    pki = tmp_path / "pki"
    pki.mkdir()
    tls = make_pki(pki)("reviewloop")
    flags = ("--tls-ca", tls["REVIEWLOOP_TLS_CA"], "--tls-cert", tls["REVIEWLOOP_TLS_CERT"])
    key_file = pki / "service-auth-key"
    key_file.write_text("k" * 48)
    flags += ("--tls-key", tls["REVIEWLOOP_TLS_KEY"], "--service-auth-key-file", str(key_file))
    lines = _up_serves_the_slice(tmp_path, _env(tmp_path), *flags)
    assert any("mutual TLS" in line for line in lines), lines
    assert any("signed service tokens" in line for line in lines), lines


@pytest.mark.slow
def test_up_with_a_taken_port_exits_non_zero_with_a_clear_message(tmp_path: Path) -> None:
    import socket

    env = _env(tmp_path)
    with socket.socket() as holder:
        host, _, port = env["REVIEWLOOP_NUDGE_ADDR"].rpartition(":")
        holder.bind((host, int(port)))
        holder.listen()
        result = subprocess.run(
            [sys.executable, "-m", "stack", "up"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode != 0
    assert "port already in use" in result.stderr and "nudge" in result.stderr
