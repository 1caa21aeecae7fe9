"""A queue a team can work all day (issue 38): splits with counts, the agent column, and batch decisions
on selected drafts, each on its own compare-and-set with its own result line; a batch never approves a
draft whose warnings it did not show."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.conftest import Api
from tests.console.conftest import Relay
from tests.console.test_console import _approve_by_api, _project, axe_clean, review, sign_in, submit


async def test_splits_and_a_batch_each_with_its_own_result(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    plain = await submit(capi, p["agent"], subject="plain")
    raced = await submit(capi, p["agent"], subject="raced")
    hidden = await submit(capi, p["agent"], subject="hidden", body_text="Pay\u200b by Friday.")
    other = await submit(capi, p["agent"], subject="other")
    page = await new_page()
    await sign_in(page, p["human"])
    await expect(page.locator('[data-split="all"]')).to_have_text("All pending (4)")
    await expect(page.locator('[data-split="needs_review"]')).to_have_text("Needs review (4)")
    await expect(page.locator('[data-split="held"]')).to_have_text("Held by a rule (0)")
    await expect(page.locator(f"#row-{plain} td.agent")).to_contain_text("(agent)")
    await expect(page.locator(f"#row-{hidden}")).to_contain_text("1 warning")
    await axe_clean(page, "queue-splits")

    # Another reviewer picks one up after the queue was read: its compare-and-set fails on its own.
    opened = await capi.http.post(
        f"/v1/reviews/{raced}/open", json={"revision": 1, "version": 1}, headers=capi.auth(p["admin"])
    )
    assert opened.status_code == 200, opened.text
    for rid in (plain, raced, hidden):
        await page.locator(f"#pick-{rid}").check()
    await page.get_by_role("button", name="Decide selected").click()
    results = page.locator("#batch-results li")
    await expect(results).to_have_count(3)
    await expect(results.nth(0)).to_contain_text(f"({plain}): approved.")
    await expect(results.nth(1)).to_contain_text(f"({raced}): not approved:")
    await expect(results.nth(2)).to_contain_text(
        f"({hidden}): not approved: it has 1 warning a batch does not show"
    )
    await axe_clean(page, "queue-batch-result")
    assert (await review(capi, p["agent"], plain))["state"] in ("approved", "sent")
    assert (await review(capi, p["agent"], hidden))["state"] == "needs_review"

    # A reject needs its one reason; every selected draft gets it.
    await page.goto("/console/queue")
    await page.locator(f"#pick-{other}").check()
    await page.locator(f"#pick-{hidden}").check()
    await page.get_by_label("Reject", exact=True).check()
    await page.get_by_label("Reason for a reject").fill("Wrong quarter; redo it for Q4.")
    await page.get_by_role("button", name="Decide selected").click()
    await expect(results).to_have_count(2)
    await expect(results.nth(0)).to_contain_text(f"({hidden}): rejected.")
    await expect(results.nth(1)).to_contain_text(f"({other}): rejected.")
    assert (await review(capi, p["agent"], other))["state"] == "rejected"


async def test_parked_sends_are_a_split_with_a_count(capi: Api, new_page: Any, relay: Relay) -> None:
    """A send parked for reconciliation (the relay drops after DATA) is its own split of the queue."""
    p = await _project(capi)
    rid = await submit(capi, p["agent"], subject="parked")
    waiting = await submit(capi, p["agent"], subject="waiting")
    relay.drop_after_data = True
    try:
        assert (await _approve_by_api(capi, p["human"], rid))["state"] == "approved"
    finally:
        relay.drop_after_data = False
    assert (await review(capi, p["agent"], rid))["delivery"]["status"] == "send_needs_reconciliation"
    page = await new_page()
    await sign_in(page, p["human"])
    split = page.locator('[data-split="parked"]')
    await expect(split).to_have_text("Parked sends (1)")
    await expect(page.locator(f"#row-{rid}")).to_have_count(0)
    await split.click()
    await expect(page.locator(f"#row-{rid}")).to_contain_text("approved")
    await expect(page.locator(f"#row-{waiting}")).to_have_count(0)
    await expect(page.locator('.splits [aria-current="page"]')).to_have_text("Parked sends (1)")
    await axe_clean(page, "queue-parked")


async def test_escalated_drafts_are_a_split_with_a_count(capi: Api, new_page: Any) -> None:
    """Escalate returns a draft to needs_review; the queue keeps it apart, badged and counted."""
    p = await _project(capi)
    rid = await submit(capi, p["agent"], subject="escalated")
    plain = await submit(capi, p["agent"], subject="plain")
    human = capi.auth(p["human"])
    opened = await capi.http.post(
        f"/v1/reviews/{rid}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200, opened.text
    escalated = await capi.http.post(
        f"/v1/reviews/{rid}/decision",
        json={"action": "escalate", "revision": 1, "version": opened.json()["version"], "feedback": "legal"},
        headers=human,
    )
    assert escalated.status_code == 200, escalated.text
    page = await new_page()
    await sign_in(page, p["human"])
    split = page.locator('[data-split="escalated"]')
    await expect(split).to_have_text("Escalated (1)")
    await expect(page.locator(f"#row-{rid} .badge.escalated")).to_have_text("escalated")
    await split.click()
    await expect(page.locator(f"#row-{rid}")).to_be_visible()
    await expect(page.locator(f"#row-{plain}")).to_have_count(0)
    await axe_clean(page, "queue-escalated")
