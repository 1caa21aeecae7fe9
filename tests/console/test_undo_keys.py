"""Issue 38's undo from the keyboard, in headless Chromium: ``z`` presses the Undo of the release the page
offers (the toast of the decision that led here, else the review page's own "Undo (n s left)" or a batch's
one line left open) and never while typing in a field; a batch's lines each have an Undo named for its draft,
and with several open ``z`` undoes none and says so. Each undo is read back through the gateway, and
nothing reaches the SMTP relay. The window is long (120 s, this stack is test_undo_later's) so timing
never decides a test."""

from __future__ import annotations

import re
from typing import Any

from playwright.async_api import Page, expect

from tests.conftest import INTENT, Api
from tests.console.test_console import _project, axe_clean, review, sign_in, submit
from tests.console.test_undo_later import console_stack  # noqa: F401 (the module's long-window stack)
from tests.e2e.test_delivery_smtp import Relay

UNDONE = "Undone: the draft is back as it was before your decision, and nothing was sent."


async def _undone(api: Api, key: str, review_id: str) -> None:
    """The draft is back in review with the undo in its thread and no window left."""
    read = await review(api, key, review_id)
    assert read["state"] == "in_review" and "undo_until" not in read, read
    assert read["turns"][-1]["turn_type"] == "undo"


async def _restored_page(page: Page, review_id: str) -> None:
    """The browser is on the restored draft, which says it was undone, with focus on the page."""
    await expect(page).to_have_url(re.compile(f"/console/reviews/{review_id}\\?done=undone$"))
    await expect(page.locator("#live")).to_have_text(UNDONE)
    await expect(page.locator("main")).to_be_focused()


async def test_z_types_in_a_field_then_undoes_the_toast_and_the_review_pages_own_window(
    capi: Api, new_page: Any, relay: Relay
) -> None:
    p = await _project(capi)
    first = await submit(capi, p["agent"], intent={**INTENT, "summary": "Invite Dana to the pilot review"})
    second = await submit(capi, p["agent"], intent={**INTENT, "summary": "Thank Lee for the intro"})
    page = await new_page()
    await sign_in(page, p["human"])
    for rid in (second, first):  # the next draft is open too, so its reject reason can be typed
        await page.goto(f"/console/reviews/{rid}")
        await page.get_by_role("button", name="Open for review").click()
        await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
    await page.keyboard.press("a")
    await expect(page).to_have_url(re.compile(f"/console/reviews/{second}"))
    toast = page.get_by_role("region", name="Undo your approval")
    await expect(toast).to_be_visible()

    # Typing a reject reason, z is a letter: typed, and no form is sent (an Undo submits its form at once).
    await page.evaluate("document.addEventListener('submit', () => { window.sent = true; }, true)")
    await page.keyboard.press("r")
    reason = page.locator("#reject-feedback")
    await expect(reason).to_be_focused()
    await page.keyboard.press("z")
    await expect(reason).to_have_value("z")
    assert await page.evaluate("window.sent === undefined")
    await expect(toast).to_be_visible()
    assert (await review(capi, p["human"], first))["state"] == "approved"

    # Escape leaves the field; z then undoes the approval the toast names.
    await page.keyboard.press("Escape")
    await page.keyboard.press("z")
    await _restored_page(page, first)
    await _undone(capi, p["human"], first)

    # Approved again and navigated back to: z presses the page's own Undo (its hint says so).
    await page.get_by_role("button", name="Approve").first.click()
    await expect(page).to_have_url(re.compile(f"/console/reviews/{second}"))
    await page.goto(f"/console/reviews/{first}")
    undo = page.locator("#undo-window").get_by_role("button", name=re.compile(r"^Undo \(\d+ s left\)$"))
    await expect(undo).to_have_attribute("aria-keyshortcuts", "z")
    await axe_clean(page, "review-undo-window-key")
    await page.keyboard.press("z")
    await _restored_page(page, first)
    read = await review(capi, p["human"], first)
    assert read["state"] == "in_review" and [t["turn_type"] for t in read["turns"]].count("undo") == 2
    assert relay.received == []


async def test_batch_lines_are_undone_by_name_and_z_only_when_one_is_left(
    capi: Api, new_page: Any, relay: Relay
) -> None:
    p = await _project(capi)
    intents = ("Invite Dana to the pilot review", "Thank Lee for the intro")
    rids = [await submit(capi, p["agent"], intent={**INTENT, "summary": s}) for s in intents]
    page = await new_page()
    await sign_in(page, p["human"])
    for rid in rids:
        await page.locator(f"#pick-{rid}").check()
    await page.get_by_role("button", name="Decide selected").click()
    names = [f"Undo: \u201c{s}\u201d ({rid})" for s, rid in zip(intents, rids, strict=True)]
    for name in names:
        await expect(page.get_by_role("button", name=name, exact=True)).to_be_visible()
    await axe_clean(page, "batch-undo-named")

    # Two lines open: z cannot know which one is meant, so it undoes neither and says so.
    await page.keyboard.press("z")
    await expect(page.locator("#live")).to_have_text(
        "Nothing undone: several drafts here can be undone. Choose the Undo of the one you mean."
    )
    assert [(await review(capi, p["human"], rid))["state"] for rid in rids] == ["approved"] * 2

    # Each named Undo takes back its own draft; the one left open is then z's.
    await page.get_by_role("button", name=names[1], exact=True).click()
    results = page.locator("#batch-results li")
    await expect(results.nth(1)).to_contain_text(f"({rids[1]}): undone; nothing was sent.")
    await _undone(capi, p["human"], rids[1])
    assert (await review(capi, p["human"], rids[0]))["state"] == "approved"
    left = page.get_by_role("button", name=names[0], exact=True)
    await expect(left).to_have_attribute("aria-keyshortcuts", "z")
    await page.keyboard.press("z")
    await expect(results).to_have_text([f"\u201c{intents[0]}\u201d ({rids[0]}): undone; nothing was sent."])
    await _undone(capi, p["human"], rids[0])
    assert relay.received == []
