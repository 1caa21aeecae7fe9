"""Run every part as its own process: ``reviewloop up`` and the e2e tests.

Each child logs to ``<data dir>/logs/<name>.log``. A taken port or a dead child is a clear error,
never a hang; ``stop()`` terminates every child and waits for it.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

import grpc
import httpx
from gateway.settings import GatewayEnvironment
from grpc_health.v1 import health_pb2, health_pb2_grpc
from reviewloop.files import private_dir
from reviewloop.trust import Trust

from stack.topology import ALL, GATEWAY, is_unix, with_defaults

# The process of monolithic mode among ``Stack.procs``.
MONOLITH = "reviewloop"


class LaunchError(RuntimeError):
    pass


def port_free(addr: str) -> bool:
    """Whether a server could listen on ``addr`` now.

    The servers bind with SO_REUSEADDR (gRPC and uvicorn both do), so the probe does too: a port that holds
    only the TIME_WAIT sockets of a stopped stack is free, and ``reviewloop up`` can start again at once.
    """
    if is_unix(addr):
        return _unix_free(addr.removeprefix("unix:"))
    host, _, port = addr.rpartition(":")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError:
            return False
    return True


def _unix_free(path: str) -> bool:
    """Whether no server answers on the Unix socket ``path`` (a stale file of a stopped one is free).

    gRPC unlinks what is at the path before it binds, so a second stack would take a live one's socket
    without a word: it is refused here.
    """
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(path)
        except OSError:
            return True
    return False


@cache
def _ephemeral_range() -> range:
    """The ports the kernel hands to outgoing connections (Linux's default where it says none)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing holds now, for a server started a moment later.

    Never one of the kernel's ephemeral ports: between this probe and the server's bind, any outgoing
    connection (to PostgreSQL, to a peer) may be given an ephemeral port, and a server that finds it taken
    dies ("cannot listen"). Never the same port twice in one process either.
    """
    for _ in range(1000):
        port = random.randrange(10000, 65536)
        if port not in _ephemeral_range() and port not in _handed_out and port_free(f"127.0.0.1:{port}"):
            _handed_out.add(port)
            return port
    raise LaunchError("no free loopback port outside the ephemeral range")


class Stack:
    """The processes of one reviewloop deployment on this machine."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = with_defaults(os.environ if env is None else env)
        # Read once, with every part's placement. The gateway's settings are the widest (every service's
        # and its own): a bad value anywhere is refused here (ConfigError), before any start.
        self.settings = GatewayEnvironment.placed(*ALL).from_env(self.env)
        self.data_dir = self.settings.data_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # The parts' own credentials: under mTLS (REVIEWLOOP_TLS_*) the health checks need a client
        # certificate like any caller. A half-configured mTLS is refused here (ConfigError), before any start.
        self.trust = Trust.from_settings("stack", self.settings)

    def address(self, name: str) -> str:
        return self.settings.address(name)

    def log_path(self, name: str) -> Path:
        return self.data_dir / "logs" / f"{name}.log"

    def ops_address(self, name: str) -> str:
        """Where ``name`` serves ``/metrics``, ``/livez`` and ``/readyz``: a service on its ops port; the
        gateway on its own ``REVIEWLOOP_GATEWAY_METRICS_ADDR`` if set, else on its public port."""
        return self.settings.metrics_address(name) or self.address(name)

    def check_ports(self, names: Iterable[str] = ALL) -> None:
        wanted = [(n, self.address(n)) for n in names]
        wanted += [(f"{n} ops", ops) for n in names if (ops := self.ops_address(n)) != self.address(n)]
        taken = [f"{n} ({addr})" for n, addr in wanted if not port_free(addr)]
        if taken:
            raise LaunchError(
                "port already in use: " + ", ".join(taken) + "; stop what holds it, or set "
                "REVIEWLOOP_<SERVICE>_ADDR (REVIEWLOOP_<SERVICE>_METRICS_ADDR for an ops port) to another "
                "address."
            )

    def start(self, name: str) -> None:
        self._one_part(name)
        private_dir(self.log_path(name).parent)  # the data dir and its logs are the service user's alone
        with open(os.open(self.log_path(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", name], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def start_monolith(self) -> None:
        """Every part in one process, ``reviewloop up --target all``, filed as ``MONOLITH``.

        Its own log lines go to ``logs/reviewloop.log``; what ``up`` prints, to ``logs/up.log``.
        """
        self.log_path("up").parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path("up"), "ab") as log:
            self.procs[MONOLITH] = subprocess.Popen(
                [sys.executable, "-m", "stack", "up", "--target", "all"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _one_part(self, name: str) -> None:
        """A part of a monolith does not start or stop alone: refused, where it would pass unnoticed."""
        if MONOLITH in self.procs and name != MONOLITH:
            raise LaunchError(f"{name} runs inside the monolith here: stop or start {MONOLITH} as a whole")

    def dead(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.poll() is not None]

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path(name).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    async def wait_serving(self, names: Iterable[str], timeout_s: float = 60.0) -> None:
        """Wait until every named process reports SERVING (gRPC health; the gateway's /healthz)."""
        deadline = time.monotonic() + timeout_s
        pending = list(names)
        while pending:
            for name in self.dead():
                if name in pending:
                    raise LaunchError(
                        f"{name} exited with code {self.procs[name].returncode}:\n{self.log_tail(name)}"
                    )
            pending = [n for n in pending if not await self._serving(n)]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise LaunchError(f"not SERVING after {timeout_s:.0f}s: {', '.join(pending)}")
            await asyncio.sleep(0.2)

    async def _serving(self, name: str) -> bool:
        if name == GATEWAY:
            try:
                async with httpx.AsyncClient(timeout=2) as client:
                    response = await client.get(f"http://{self.address(name)}/healthz")
                return response.status_code == 200
            except httpx.HTTPError:
                return False
        try:
            async with self.trust.channel(self.address(name), options=(), interceptors=[]) as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(  # type: ignore[attr-defined]  # stubs declare no methods
                    health_pb2.HealthCheckRequest(service=""), timeout=2
                )
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
        except grpc.aio.AioRpcError:
            return False

    def stop(self, name: str, timeout_s: float = 10.0) -> None:
        self._one_part(name)
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name in list(self.procs):
            self.stop(name)
