"""The console in a real browser: headless Debian Chromium driven by Playwright (never a downloaded
browser), against one whole stack of real processes per module. Screenshots land in tests/console/output/."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from stack.launcher import Stack
from stack.topology import GATEWAY

from tests.conftest import Api, Databases, start_stack

CHROMIUM = os.environ.get("REVIEWLOOP_CHROMIUM", "/usr/bin/chromium")
OUTPUT = Path(__file__).parent / "output"

try:
    from playwright.async_api import Browser, Page, async_playwright
except ImportError:  # pragma: no cover - the dev extra is missing
    async_playwright = None  # type: ignore[assignment]


def _skip_reason() -> str | None:
    if async_playwright is None:
        return "playwright is not installed (pip install -e '.[dev]')"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set REVIEWLOOP_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
async def console_stack(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    running = await start_stack(databases, "sqlite", tmp_path_factory.mktemp("console-stack"))
    yield running
    running.stop_all()


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

    yield open_
    for context in contexts:
        await context.close()


async def shot(page: Page, name: str) -> Path:
    """A full-page PNG of ``page`` under tests/console/output/."""
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path
