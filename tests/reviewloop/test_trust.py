"""Service-to-service trust: with a service key or mTLS configured, only reviewloop's own processes may
call a service and assert a Principal; with neither (the loopback default) nothing changes."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from diff.__main__ import SPEC as DIFF
from grpc_health.v1 import health_pb2, health_pb2_grpc
from reviewloop.common.v1 import common_pb2
from reviewloop.config import ConfigError, ServiceConfig
from reviewloop.diff.v1 import diff_pb2, diff_pb2_grpc
from reviewloop.service import Peers, RunningService, start
from reviewloop.trust import Trust
from stack.launcher import free_port

KEY = "k" * 40
PRINCIPAL = common_pb2.Principal(
    org_id="org_1", project_id="prj_1", actor_kind=common_pb2.ACTOR_KIND_AGENT, actor_id="agt_1"
)
GET = diff_pb2.GetDiffRequest(principal=PRINCIPAL, review_id="rr_x", from_revision=1, to_revision=2)


@asynccontextmanager
async def diff_service(tmp_path: Path, trust: Trust) -> AsyncIterator[tuple[RunningService, str]]:
    listen = f"127.0.0.1:{free_port()}"
    config = ServiceConfig(
        service="diff",
        db_url=f"sqlite+aiosqlite:///{tmp_path / 'diff.db'}",
        listen=listen,
        peers={},
        trust=trust,
    )
    running = await start(DIFF, config)
    try:
        yield running, listen
    finally:
        await running.stop(grace=0)


async def get_diff(channel: grpc.aio.Channel) -> grpc.StatusCode:
    try:
        await diff_pb2_grpc.DiffServiceStub(channel).GetDiff(GET, timeout=5)  # type: ignore[attr-defined]
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def health(channel: grpc.aio.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)  # type: ignore[attr-defined]
    return int((await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)).status)


async def test_a_principal_from_a_caller_without_a_service_token_is_refused(tmp_path: Path) -> None:
    async with diff_service(tmp_path, Trust("diff", KEY.encode())) as (_, listen):
        async with grpc.aio.insecure_channel(listen) as anonymous:
            assert await get_diff(anonymous) == grpc.StatusCode.UNAUTHENTICATED
            # Probes still get their answer.
            assert await health(anonymous) == health_pb2.HealthCheckResponse.SERVING
        forger = Peers({"diff": listen}, Trust("review_state", b"f" * 40))
        assert await get_diff(forger.channel("diff")) == grpc.StatusCode.UNAUTHENTICATED
        await forger.close()
        # A peer holding the key reaches the domain (which answers: no such diff).
        peer = Peers({"diff": listen}, Trust("review_state", KEY.encode()))
        assert await get_diff(peer.channel("diff")) == grpc.StatusCode.NOT_FOUND
        await peer.close()


async def test_a_stale_or_replayed_token_for_another_method_is_refused() -> None:
    trust = Trust("review_state", KEY.encode())
    token = trust.sign("/reviewloop.diff.v1.DiffService/GetDiff", now=1_000_000)
    assert trust.verify(token, "/reviewloop.diff.v1.DiffService/GetDiff", now=1_000_100) == "review_state"
    assert trust.verify(token, "/reviewloop.diff.v1.DiffService/GetDiff", now=1_000_000 + 301) is None
    assert trust.verify(token, "/reviewloop.diff.v1.DiffService/ComputeDiff", now=1_000_100) is None


async def test_the_loopback_default_needs_no_configuration(tmp_path: Path) -> None:
    async with diff_service(tmp_path, Trust.from_env("diff", {})) as (_, listen):
        channel = grpc.aio.insecure_channel(listen)
        assert await get_diff(channel) == grpc.StatusCode.NOT_FOUND
        await channel.close()


def make_pki(tmp: Path) -> Callable[[str], dict[str, str]]:
    """A CA and certificates it signs for 127.0.0.1 (openssl), as REVIEWLOOP_TLS_* settings."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip

    def issue(name: str) -> dict[str, str]:
        (tmp / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr")  # fmt: skip
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.crt")  # fmt: skip
        return {
            "REVIEWLOOP_TLS_CA": str(tmp / "ca.crt"),
            "REVIEWLOOP_TLS_CERT": str(tmp / f"{name}.crt"),
            "REVIEWLOOP_TLS_KEY": str(tmp / f"{name}.key"),
        }

    return issue


async def test_mutual_tls_admits_only_callers_with_a_certificate_from_the_ca(tmp_path: Path) -> None:
    issue = make_pki(tmp_path)
    async with diff_service(tmp_path, Trust.from_env("diff", issue("diff"))) as (_, listen):
        peer = Peers({"diff": listen}, Trust.from_env("review_state", issue("review_state")))
        assert await get_diff(peer.channel("diff")) == grpc.StatusCode.NOT_FOUND
        await peer.close()
        async with grpc.aio.insecure_channel(listen) as plain:
            assert await get_diff(plain) == grpc.StatusCode.UNAVAILABLE
        ca = (tmp_path / "ca.crt").read_bytes()
        async with grpc.aio.secure_channel(listen, grpc.ssl_channel_credentials(ca)) as no_client_cert:
            assert await get_diff(no_client_cert) == grpc.StatusCode.UNAVAILABLE


def test_half_configured_trust_is_refused_at_boot(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        Trust.from_env("diff", {"REVIEWLOOP_SERVICE_AUTH_KEY": "short"})
    with pytest.raises(ConfigError):
        Trust.from_env("diff", {"REVIEWLOOP_TLS_CA": str(tmp_path / "ca.crt")})


async def test_a_rolling_key_rotation_keeps_old_and_new_pods_talking_then_drops_the_old_key(
    tmp_path: Path,
) -> None:
    old, new = "o" * 40, "n" * 40
    before = {"REVIEWLOOP_SERVICE_AUTH_KEY": old}
    # Rollout 1: every pod learns the new key but still signs with the old one.
    learn = {"REVIEWLOOP_SERVICE_AUTH_KEY": old, "REVIEWLOOP_SERVICE_AUTH_KEY_PREVIOUS": new}
    # Rollout 2: pods sign with the new key and still accept the old one (a comma list works too).
    switch = {"REVIEWLOOP_SERVICE_AUTH_KEY": new, "REVIEWLOOP_SERVICE_AUTH_KEY_PREVIOUS": f"{'z' * 40},{old}"}
    # Rollout 3: the old key is dropped.
    after = {"REVIEWLOOP_SERVICE_AUTH_KEY": new}

    async def code(server_env: dict[str, str], caller_env: dict[str, str]) -> grpc.StatusCode:
        async with diff_service(tmp_path, Trust.from_env("diff", server_env)) as (_, listen):
            peer = Peers({"diff": listen}, Trust.from_env("review_state", caller_env))
            try:
                return await get_diff(peer.channel("diff"))
            finally:
                await peer.close()

    # NOT_FOUND: the call passed authentication and reached the domain (no such diff).
    ok = grpc.StatusCode.NOT_FOUND
    # During each rollout, pods of both generations call each other both ways.
    for older, newer in ((before, learn), (learn, switch), (switch, after)):
        assert await code(newer, older) == ok, (older, newer)  # an old-key client, a new server
        assert await code(older, newer) == ok, (older, newer)  # a new-key client, an old server
    # After the rotation, a caller still holding only the old key is refused.
    assert await code(after, before) == grpc.StatusCode.UNAUTHENTICATED
    # And without the overlap (jumping straight to the new key) the generations could not talk.
    assert await code(after, learn) == grpc.StatusCode.UNAUTHENTICATED


def test_a_previous_key_needs_a_current_key_and_the_same_strength(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        Trust.from_env("diff", {"REVIEWLOOP_SERVICE_AUTH_KEY_PREVIOUS": "p" * 40})
    with pytest.raises(ConfigError):
        Trust.from_env(
            "diff", {"REVIEWLOOP_SERVICE_AUTH_KEY": "k" * 40, "REVIEWLOOP_SERVICE_AUTH_KEY_PREVIOUS": "short"}
        )
