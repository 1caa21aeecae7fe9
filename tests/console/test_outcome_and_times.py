"""Issue 38, after a decision, in headless Chromium: the outcome is visible (a toast naming the draft by its
intent) and announced, focus moves to the next draft, Ctrl/Cmd+Enter submits a reason or an edit, and times
read local and relative ("3 min ago") with the exact time on hover."""

from __future__ import annotations

import re
from typing import Any

from playwright.async_api import Browser, expect

from tests.conftest import INTENT, Api
from tests.console.test_console import _project, axe_clean, outcome, sign_in, submit


async def test_outcome_toast_focus_ctrl_enter_and_local_relative_times(
    capi: Api, new_page: Any, browser: Browser, base_url: str
) -> None:
    p = await _project(capi)
    first = await submit(capi, p["agent"], intent={**INTENT, "summary": "Invite Dana to the pilot review"})
    second = await submit(capi, p["agent"], intent={**INTENT, "summary": "Thank Lee for the intro"})
    context = await browser.new_context(base_url=base_url, timezone_id="Asia/Kathmandu", locale="en-GB")
    try:
        page = await new_page(context)
        await sign_in(page, p["human"], f"/console/reviews/{first}")
        await page.get_by_role("button", name="Open for review").click()
        await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")

        # Times: relative, with the exact moment in the reader's zone (UTC+05:45) on hover.
        opened = page.get_by_role("region", name="Thread and chat").locator("time").first
        await expect(opened).to_have_text(re.compile(r"^(just now|\d+ (min|h|d) ago)$"))
        stamp = await opened.get_attribute("datetime")
        local = await page.evaluate(
            "(iso) => new Date(iso).toLocaleString(undefined, {dateStyle: 'medium', timeStyle: 'long'})",
            stamp,
        )
        await expect(opened).to_have_attribute("title", local)
        assert "GMT+5:45" in local or "+0545" in local or "NPT" in local, local

        # Ctrl+Enter in the reason submits the reject; the next draft has focus, and a toast (the live
        # region, visible) names the rejected draft by its intent.
        await page.keyboard.press("r")
        await page.keyboard.type("Not before the contract is signed.")
        await page.keyboard.press("Control+Enter")
        await expect(page).to_have_url(re.compile(f"/console/reviews/{second}"))
        toast = page.get_by_role("status").filter(has_text="Rejected")
        await expect(toast).to_be_visible()
        await expect(toast).to_have_text(outcome("Rejected", first))
        await expect(toast).to_contain_text("\u201cInvite Dana to the pilot review\u201d")
        await expect(page.locator("main")).to_be_focused()
        await axe_clean(page, "review-after-reject-toast")

        # Ctrl+Enter in an edit submits it (to its preview of the exact message).
        await page.get_by_role("button", name="Open for review").click()
        await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
        await page.keyboard.press("e")
        await expect(page.get_by_label("Subject")).to_be_focused()
        await page.keyboard.type(" (thanks)")
        await page.keyboard.press("Control+Enter")
        await expect(page.get_by_role("heading", name=re.compile("^Review your edit"))).to_be_visible()
        await page.get_by_role("button", name="Save edit and approve").click()
        await expect(page.locator("#live")).to_have_text(outcome("Edited and approved", second))
        await expect(page.locator("#live")).to_be_visible()

        # The queue's ages are relative times with the exact moment on hover.
        third = await submit(capi, p["agent"], intent={**INTENT, "summary": "Follow up with Ada"})
        await page.goto("/console/queue")
        age = page.locator(f"#row-{third} time")
        await expect(age).to_have_text("just now")
        await expect(age).to_have_attribute("title", re.compile(r"\d{4}"))
    finally:
        await context.close()
