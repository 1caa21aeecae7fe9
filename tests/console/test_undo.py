"""Issue 38's undo window in headless Chromium: after an approve the toast offers Undo (a button, and the
``z`` key), counts down and is announced; the undo lands back on the draft as it was, and nothing reaches
the SMTP relay; an approval left alone goes out once its window closes, and the toast goes with it."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from playwright.async_api import expect
from stack.launcher import Stack, free_port

from tests.conftest import INTENT, Api, Databases, start_stack
from tests.console.conftest import _skip_reason
from tests.console.test_console import _project, axe_clean, review, sign_in, submit
from tests.e2e.test_delivery_smtp import Relay

WINDOW_S = 6  # small, yet long enough for a loaded two-core box to render the page and press a key


@pytest.fixture(scope="module")
async def console_stack(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory, relay: Relay
) -> AsyncIterator[Stack]:
    """This module's stack opens an undo window (the shared console stack releases at once)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    extra = {
        "REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}",
        "REVIEWLOOP_UNDO_WINDOW_S": str(WINDOW_S),
        "REVIEWLOOP_RECONCILE_SWEEP_S": "0.5",
    }
    running = await start_stack(databases, "sqlite", tmp_path_factory.mktemp("console-undo"), extra)
    yield running
    running.stop_all()
    controller.stop()


async def _until_sent(api: Api, key: str, review_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while (read := await review(api, key, review_id))["state"] != "sent":
        assert time.monotonic() < deadline, read
        await asyncio.sleep(0.2)
    return read


async def test_undo_from_the_toast_restores_the_draft_and_sends_nothing(
    capi: Api, new_page: Any, relay: Relay
) -> None:
    p = await _project(capi)
    first = await submit(capi, p["agent"], intent={**INTENT, "summary": "Invite Dana to the pilot review"})
    second = await submit(capi, p["agent"], intent={**INTENT, "summary": "Thank Lee for the intro"})
    page = await new_page()
    await sign_in(page, p["human"], f"/console/reviews/{first}")
    await page.get_by_role("button", name="Open for review").click()
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
    await page.keyboard.press("a")

    # The next draft, a toast naming the approved one, and Undo beside it while the window is open.
    await expect(page).to_have_url(re.compile(f"/console/reviews/{second}"))
    toast = page.get_by_role("region", name="Undo your approval")
    await expect(toast).to_be_visible()
    await expect(toast.get_by_role("button", name="Undo")).to_have_attribute("aria-keyshortcuts", "z")
    await expect(toast).to_contain_text(re.compile(r"Sending in \d s"))
    live = page.locator("#live")
    await expect(live).to_contain_text(re.compile(r"^Approved \u201cInvite Dana to the pilot review\u201d"))
    await expect(live).to_contain_text(re.compile(r"Undo with the Undo button or z within \d seconds\.$"))
    await page.keyboard.press("z")
    await expect(page).to_have_url(re.compile(f"/console/reviews/{first}"))
    await expect(live).to_have_text(
        "Undone: the draft is back as it was before your decision, and nothing was sent."
    )
    await expect(page.get_by_role("region", name="Undo your approval")).to_have_count(0)
    undone = await review(capi, p["human"], first)
    assert undone["state"] == "in_review" and "undo_until" not in undone
    assert undone["turns"][-1]["turn_type"] == "undo"
    await expect(page.get_by_role("region", name="Thread and chat")).to_contain_text("undo")
    await asyncio.sleep(WINDOW_S + 1)
    assert (await review(capi, p["human"], first))["state"] == "in_review"
    assert not [r for r in relay.received if first in r[1].decode(errors="replace")]
    assert relay.received == []

    # Approved again and left alone: the toast counts down and goes; the message goes out once.
    await page.get_by_role("button", name="Approve").first.click()
    toast = page.get_by_role("region", name="Undo your approval")
    await expect(toast).to_be_visible()
    await toast.get_by_role("button", name="Undo").focus()  # reachable by keyboard (a real button)
    assert (await review(capi, p["human"], first))["state"] == "approved"
    await axe_clean(page, "review-undo-toast")
    await expect(toast).to_have_count(0, timeout=(WINDOW_S + 10) * 1000)
    await expect(live).to_have_text("The undo window closed; it is being sent.")
    await expect(page.locator("main")).to_be_focused()  # focus left the removed button for the page
    sent = await _until_sent(capi, p["human"], first)
    await asyncio.sleep(1)
    assert len(relay.received) == 1 and sent["state"] == "sent"


async def test_an_undo_after_the_window_says_it_is_too_late(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    only = await submit(capi, p["agent"], intent={**INTENT, "summary": "Confirm Thursday with Ada"})
    page = await new_page()
    await sign_in(page, p["human"], f"/console/reviews/{only}")
    await page.get_by_role("button", name="Open for review").click()
    await page.get_by_role("button", name="Approve").first.click()
    await expect(page).to_have_url(re.compile("/console/queue"))  # none left: the queue, with the toast
    await expect(page.locator("#live")).to_contain_text(
        f"Approved \u201cConfirm Thursday with Ada\u201d ({only})"
    )
    form = await page.locator("#undo-toast form").evaluate("f => f.outerHTML")
    await _until_sent(capi, p["human"], only)
    # An Undo posted after the window (a page whose countdown did not run) is refused, and says why.
    await page.evaluate(
        "html => { const d = document.createElement('div'); d.innerHTML = html;"
        " document.body.appendChild(d); d.querySelector('form').submit(); }",
        form,
    )
    await expect(page).to_have_url(re.compile(f"/console/reviews/{only}"))
    await expect(page.locator("#live")).to_have_text(
        "Too late to undo: its undo window had closed and it went to delivery."
    )
