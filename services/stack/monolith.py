"""Monolithic mode, ``reviewloop up --target all``: every service and the gateway in one process.

As Grafana Loki and Mimir run with ``-target=all``: one process and one event loop for a team on one
small machine, where microservices mode (``reviewloop up``, ``deploy/k8s``) runs each part as its own
process. Nothing else changes. Each service boots through the same ``reviewloop.service.start`` as its
own process does, with its own store, units of work, outbox and relay, and its own grpc.aio server
(on a Unix socket in a private directory, ``topology.colocated``) for the tools and operators that call
it. The contexts still meet only over their protobuf contracts, but a call between two of them goes
through an in-process channel (``reviewloop.inproc``): request and answer serialized, the same client
and server interceptors (service tokens, tracing, error mapping), the servicer's handler run on the same
loop with no HTTP/2 and no gRPC core (~494 us of CPU a call over the socket). ``REVIEWLOOP_INPROCESS=0``
sends those calls over the sockets instead, as before (to compare). The gateway is its own ASGI app
under one uvicorn server on the same loop.

This module is the composition root's, like ``stack.cli``: it may import every service's boot.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import uvicorn
from reviewloop import telemetry
from reviewloop.config import ServiceConfig
from reviewloop.inproc import LocalServer
from reviewloop.service import RunningService, start

from stack.topology import GATEWAY, SERVICES

log = logging.getLogger(__name__)

# The telemetry resource of the one process: spans keep their service in their names (``rpc.service``).
NAME = "reviewloop"
# "0" sends the calls between the parts over their Unix sockets (grpc.aio) instead of in process.
INPROCESS_ENV = "REVIEWLOOP_INPROCESS"


def _spec(part: str) -> Any:
    return importlib.import_module(f"{part}.__main__").SPEC


def log_to(path: Path) -> None:
    """Send the process's log lines (JSON, as every part's) to ``path`` instead of the terminal."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(telemetry.JsonLogFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


class Monolith:
    """The five services and the gateway, started and stopped together on the running loop."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.services: list[RunningService] = []
        # Each service's in-process server, by name (None: calls between the parts go over the sockets).
        self.local: dict[str, LocalServer] | None = {} if self.env.get(INPROCESS_ENV, "1") != "0" else None
        self.gateway: uvicorn.Server | None = None
        self._gateway_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start every service (SERVING, store migrated), then the gateway; a failure stops what started."""
        from gateway.__main__ import server
        from gateway.settings import GatewaySettings

        try:
            for name in SERVICES:
                spec = _spec(name)
                config = ServiceConfig.read(name, spec.all_peers(), self.env, spec.settings)
                # The server, relay and jobs start in a context naming the part: their spans say whose they are.
                part = contextvars.copy_context()
                part.run(telemetry.current_part.set, name)
                self.services.append(await asyncio.create_task(start(spec, config, self.local), context=part))
            log.info(
                "calls between the parts go %s",
                "in process (reviewloop.inproc)"
                if self.local is not None
                else "over their sockets (grpc.aio)",
            )
            self.gateway = server(GatewaySettings.from_env(self.env), embedded=True, local=self.local)
            part = contextvars.copy_context()
            part.run(telemetry.current_part.set, GATEWAY)
            self._gateway_task = asyncio.create_task(self.gateway.serve(), name="gateway", context=part)
            while not self.gateway.started:
                if self._gateway_task.done():
                    await self._gateway_task
                    raise RuntimeError("the gateway stopped while it started (is its port taken?)")
                await asyncio.sleep(0.05)
        except BaseException:
            await self.stop()
            raise

    @property
    def failed(self) -> bool:
        """Whether a part stopped on its own (the gateway's server ended before a stop)."""
        return self._gateway_task is not None and self._gateway_task.done()

    async def stop(self) -> None:
        """Stop the gateway first (no new requests), then each service: drained, relay and store closed."""
        if self.gateway is not None and self._gateway_task is not None:
            self.gateway.should_exit = True
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._gateway_task
        for running in reversed(self.services):
            try:
                await running.stop()
            except Exception:
                log.exception("a service failed to stop cleanly")
        self.services.clear()
