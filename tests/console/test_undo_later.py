"""Issue 38's undo window after the toast is gone, in headless Chromium: the review page of a draft still
inside its window offers its decider "Undo (n s left)", and a batch approve gives each approved line its
own Undo, named for its draft, and an "Undo all". Each is the same undo as the toast's, and restores the
draft as the decision found it (read back through the gateway). The window is long (120 s) so timing
never decides a test."""

from __future__ import annotations

import re
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

UNDO_LEFT = re.compile(r"^Undo \(\d+ s left\)$")


@pytest.fixture(scope="module")
async def console_stack(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory, relay: Relay
) -> AsyncIterator[Stack]:
    """This module's stack opens a long undo window (the shared console stack releases at once)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    port = free_port()
    controller = Controller(relay, hostname="127.0.0.1", port=port)
    controller.start()
    extra = {"REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{port}", "REVIEWLOOP_UNDO_WINDOW_S": "120"}
    running = await start_stack(databases, "sqlite", tmp_path_factory.mktemp("console-undo-later"), extra)
    yield running
    running.stop_all()
    controller.stop()


def _as_found(read: dict[str, Any]) -> tuple[Any, ...]:
    """What an undo must give back: the draft's state, revision and message."""
    return read["state"], read["revision"], read["subject"], read["body_text"]


async def test_the_review_page_offers_its_decider_an_undo_while_the_window_is_open(
    capi: Api, new_page: Any, relay: Relay
) -> None:
    p = await _project(capi)
    other = (await capi.key(p["project_id"], "human"))["api_key"]
    first = await submit(capi, p["agent"], intent={**INTENT, "summary": "Invite Dana to the pilot review"})
    await submit(capi, p["agent"], intent={**INTENT, "summary": "Thank Lee for the intro"})
    page = await new_page()
    await sign_in(page, p["human"], f"/console/reviews/{first}")
    await page.get_by_role("button", name="Open for review").click()
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
    before = await review(capi, p["human"], first)
    await page.get_by_role("button", name="Approve").first.click()
    await expect(page.get_by_role("region", name="Undo your approval")).to_be_visible()

    # Navigated back to the approved draft: the page itself offers the undo, counting down.
    await page.goto(f"/console/reviews/{first}")
    undo = page.locator("#undo-window").get_by_role("button", name=UNDO_LEFT)
    await expect(undo).to_be_visible()
    assert (await review(capi, p["human"], first))["state"] == "approved"
    await axe_clean(page, "review-undo-window")

    # Another reviewer does not get it (only the decider may undo).
    page2 = await new_page()
    await sign_in(page2, other, f"/console/reviews/{first}")
    await expect(page2.locator("main")).to_contain_text("approved")
    await expect(page2.locator("#undo-window")).to_have_count(0)

    await undo.click()
    await expect(page.locator("#live")).to_have_text(
        "Undone: the draft is back as it was before your decision, and nothing was sent."
    )
    await expect(page.locator("#undo-window")).to_have_count(0)
    after = await review(capi, p["human"], first)
    assert _as_found(after) == _as_found(before) and "undo_until" not in after
    assert after["turns"][-1]["turn_type"] == "undo"
    assert relay.received == []


async def test_a_batch_approve_offers_an_undo_per_line_and_undo_all(
    capi: Api, new_page: Any, relay: Relay
) -> None:
    p = await _project(capi)
    rids = [
        await submit(capi, p["agent"], subject=f"batch {n}", intent={**INTENT, "summary": f"Batch draft {n}"})
        for n in range(3)
    ]
    # Each line's Undo is named for its draft (its intent and id), as the line names it.
    undo = [f"Undo: \u201cBatch draft {n}\u201d ({rid})" for n, rid in enumerate(rids)]
    page = await new_page()
    await sign_in(page, p["human"])
    for rid in rids:
        await page.locator(f"#pick-{rid}").check()
    await page.get_by_role("button", name="Decide selected").click()
    results = page.locator("#batch-results li")
    await expect(results).to_have_count(3)
    for n, rid in enumerate(rids):
        await expect(results.nth(n)).to_contain_text(f"({rid}): approved.")
        await expect(results.nth(n).get_by_role("button", name=undo[n], exact=True)).to_be_visible()
        await expect(results.nth(n)).to_contain_text(re.compile(r"\(\d+ s left\)$"))
    assert [(await review(capi, p["human"], rid))["state"] for rid in rids] == ["approved"] * 3
    await axe_clean(page, "batch-undo-lines")

    # One line's Undo takes back that draft only; the others keep theirs.
    await page.get_by_role("button", name=undo[0], exact=True).click()
    await expect(results.nth(0)).to_contain_text(f"({rids[0]}): undone; nothing was sent.")
    await expect(results.nth(0).get_by_role("button")).to_have_count(0)
    for n in (1, 2):
        await expect(results.nth(n)).to_contain_text(f"({rids[n]}): approved.")
        await expect(results.nth(n).get_by_role("button", name=undo[n], exact=True)).to_be_visible()
    assert (await review(capi, p["human"], rids[1]))["state"] == "approved"
    await axe_clean(page, "batch-undo-one")

    # Undo all takes back the lines still open, each with its own result.
    await page.get_by_role("button", name="Undo all still open").click()
    await expect(results).to_have_count(2)
    for n in (0, 1):
        await expect(results.nth(n)).to_contain_text(f"({rids[n + 1]}): undone; nothing was sent.")
    await expect(page.get_by_role("button", name=re.compile("^Undo: "))).to_have_count(0)
    # The form posted again with nothing left open says so (no empty page, nothing changed).
    await page.evaluate("document.querySelector('form[action=\"/console/batch/undo\"]').requestSubmit()")
    await expect(results).to_have_text(["Nothing was undone: no line of the batch was still open."])
    for n, rid in enumerate(rids):  # each as the batch's decision found it: opened, its first revision
        after = await review(capi, p["human"], rid)
        assert (after["state"], after["revision"], after["subject"]) == ("in_review", 1, f"batch {n}")
        assert "undo_until" not in after and after["turns"][-1]["turn_type"] == "undo"
    assert relay.received == []
