"""An in-process gateway on a store of the test's backend, whose backends have nothing listening."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from gateway.asgi import create_app
from gateway.settings import GatewaySettings
from stack.launcher import free_port
from stack.topology import SERVICES

ADMIN = "rladm_inprocess_test"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The app's lifespan in a task of its own: a fixture's setup and teardown run in different tasks,
    and the MCP session manager's task group must be left from the task that entered it."""
    started, stop = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with app.router.lifespan_context(app):
            started.set()
            await stop.wait()

    task = asyncio.create_task(hold())
    await started.wait()
    try:
        yield
    finally:
        stop.set()
        await task


@asynccontextmanager
async def gateway(
    db_url: str, data_dir: Path, **overrides: Any
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    settings = GatewaySettings(
        db_url=db_url,
        host="127.0.0.1",
        port=0,
        data_dir=data_dir,
        peers={name: f"127.0.0.1:{free_port()}" for name in SERVICES},
        admin_token=ADMIN,
        max_body_bytes=64 * 1024,
        backend_timeout_s=1.0,
        otlp_endpoint=None,
    )
    for name, value in overrides.items():
        object.__setattr__(settings, name, value)
    app = create_app(settings)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(lifespan(app))
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")
        )
        yield app, client
