"""A queue a team can work all day (issue 38): the split of mail sent without review with its count, the
triage columns (agent, category, age, deadline) and a "first contact" badge on a draft to a recipient the
project has never written to nor heard from."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from playwright.async_api import Page, expect

from tests.conftest import Api
from tests.console.test_console import _project, axe_clean, review, sign_in, submit
from tests.e2e.helpers import auto_notify_category


async def _until_delivered(api: Api, key: str, review_id: str) -> None:
    deadline = time.monotonic() + 20
    while (await review(api, key, review_id)).get("delivery", {}).get("status") != "delivered":
        assert time.monotonic() < deadline, "the auto-send was never delivered"
        await asyncio.sleep(0.2)


async def test_sent_without_review_split_and_first_contact_badges(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    category = await auto_notify_category(capi, p["project_id"])
    known = f"known-{uuid.uuid4().hex[:8]}@acme.com"
    auto = await submit(
        capi, p["agent"], subject="renewal sent", to=[known], category_id=category, confidence=0.9
    )
    await _until_delivered(capi, p["agent"], auto)  # mail went to ``known``: no longer a first contact
    again = await submit(capi, p["agent"], subject="follow-up to a known address", to=[known])
    new = await submit(capi, p["agent"], subject="cold outreach", to=[f"new-{uuid.uuid4().hex[:8]}@acme.com"])
    mixed = await submit(
        capi, p["agent"], subject="known and new", to=[known], cc=[f"cc-{uuid.uuid4().hex[:8]}@acme.com"]
    )
    page: Page = await new_page()
    await sign_in(page, p["human"])
    await expect(page.locator('[data-split="all"]')).to_have_text("All pending (3)")
    await expect(page.locator('[data-split="auto_sent"]')).to_have_text("Sent without review (1)")
    for rid in (new, mixed):
        await expect(page.locator(f"#row-{rid} .badge.first-contact")).to_have_text("first contact")
    await expect(page.locator(f"#row-{again} .badge.first-contact")).to_have_count(0)
    queue = page.locator("table").first
    for column in ("Agent", "Category", "Age", "Deadline"):
        await expect(queue.get_by_role("columnheader", name=column, exact=True)).to_have_count(1)
    await expect(page.locator(f"#row-{new} td.agent")).to_contain_text("(agent)")
    await expect(page.locator(f"#row-{new} td.deadline")).to_have_text("—")
    await axe_clean(page, "console-queue-splits")

    await page.locator('[data-split="auto_sent"]').click()
    await expect(page.locator('[data-split="auto_sent"]')).to_have_attribute("aria-current", "page")
    rows = page.locator("tr.row")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_id(f"row-{auto}")
    await expect(rows.first).to_contain_text("renewals")
    await expect(rows.first.locator("td.state")).to_contain_text("auto_sent")
    await axe_clean(page, "queue-sent-without-review")
