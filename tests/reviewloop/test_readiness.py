"""Readiness: a service whose outbox relay has died reports NOT_SERVING over gRPC health and 503 on
/readyz (traffic moves to a replica that can deliver), and SERVING again once it can."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc
from reviewloop.config import ServiceConfig
from reviewloop.service import start
from rules.__main__ import SPEC as RULES
from stack.launcher import free_port


async def test_a_dead_relay_turns_the_service_not_ready_and_a_restarted_one_ready_again(
    tmp_path: Path,
) -> None:
    listen, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    config = ServiceConfig(
        service="rules",
        db_url=f"sqlite+aiosqlite:///{tmp_path / 'rules.db'}",
        listen=listen,
        peers={"review_state": f"127.0.0.1:{free_port()}", "nudge": f"127.0.0.1:{free_port()}"},
        settings=RULES.settings.from_env({"REVIEWLOOP_DATA_DIR": str(tmp_path)}),
        metrics_listen=metrics,
    )
    running = await start(RULES, config)
    watcher = asyncio.create_task(running.watch_readiness(every_s=0.05))
    try:
        async with grpc.aio.insecure_channel(listen) as channel, httpx.AsyncClient() as http:
            health = health_pb2_grpc.HealthStub(channel)  # type: ignore[attr-defined]

            async def status() -> int:
                return int((await health.Check(health_pb2.HealthCheckRequest(service=""))).status)

            async def becomes(wanted: int) -> None:
                for _ in range(200):
                    if await status() == wanted:
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(f"health never became {wanted}")

            assert (await http.get(f"http://{metrics}/readyz")).status_code == 200
            assert running.relay is not None
            await running.relay.stop()
            await becomes(health_pb2.HealthCheckResponse.NOT_SERVING)
            assert (await http.get(f"http://{metrics}/readyz")).status_code == 503
            assert (await http.get(f"http://{metrics}/livez")).status_code == 200
            running.relay.start()
            await becomes(health_pb2.HealthCheckResponse.SERVING)
            assert (await http.get(f"http://{metrics}/readyz")).status_code == 200
    finally:
        watcher.cancel()
        await running.stop(grace=0)
