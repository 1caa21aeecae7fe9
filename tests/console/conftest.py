"""The console in a real browser: headless Debian Chromium driven by Playwright (never a downloaded
browser), against one whole stack of real processes per module. Screenshots land in tests/console/output/."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from stack.launcher import Stack, free_port
from stack.topology import GATEWAY

from tests.conftest import Api, Databases, start_stack
from tests.e2e.test_delivery_smtp import Relay

CHROMIUM = os.environ.get("REVIEWLOOP_CHROMIUM", "/usr/bin/chromium")
OUTPUT = Path(__file__).parent / "output"

try:
    from playwright.async_api import Browser, Page, async_playwright, expect
except ImportError:  # pragma: no cover - the dev extra is missing
    async_playwright = None  # type: ignore[assignment]


def _skip_reason() -> str | None:
    if async_playwright is None:
        return "playwright is not installed (pip install -e '.[dev]')"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set REVIEWLOOP_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def relay() -> Relay:
    """The module stack's SMTP relay on loopback (a test sets ``drop_after_data`` to park a send)."""
    return Relay()


@pytest.fixture(scope="module")
async def console_stack(
    request: pytest.FixtureRequest,
    databases: Databases,
    tmp_path_factory: pytest.TempPathFactory,
    relay: Relay,
) -> AsyncIterator[Stack]:
    """The module's stack on SQLite: microservices, or what the module's ``STACK_TARGET`` names ("all")."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    smtp = {"REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}"}
    target = getattr(request.module, "STACK_TARGET", None)
    running = await start_stack(
        databases, "sqlite", tmp_path_factory.mktemp("console-stack"), smtp, target=target
    )
    yield running
    running.stop_all()
    controller.stop()


@pytest.fixture(scope="module")
async def capi(console_stack: Stack) -> AsyncIterator[Api]:
    client = Api(console_stack)
    yield client
    await client.http.aclose()


@pytest.fixture(scope="module")
async def browser(console_stack: Stack) -> AsyncIterator[Browser]:
    assert async_playwright is not None
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield chromium
        await chromium.close()


@pytest.fixture(scope="module")
def base_url(console_stack: Stack) -> str:
    return f"http://{console_stack.address(GATEWAY)}"


@pytest.fixture
async def new_page(browser: Browser, base_url: str) -> AsyncIterator[Any]:
    """Opens pages in fresh browser contexts (each its own cookie jar); closes them after the test."""
    contexts = []

    async def open_(context: Any = None) -> Page:
        if context is None:
            context = await browser.new_context(base_url=base_url)
            contexts.append(context)
        page: Page = await context.new_page()
        return page

    # A two-core CI box running the whole suite answers a page in seconds, not milliseconds: waits that
    # would pass at 5 s alone get 20 s there (an assertion still fails at once on a wrong value it sees).
    expect.set_options(timeout=20_000)

    yield open_
    for context in contexts:
        await context.close()


async def shot(page: Page, name: str) -> Path:
    """A full-page PNG of ``page`` under tests/console/output/."""
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path
