"""A queue a team can work all day (issue 38): the split of mail sent without review with its count, the
triage columns (agent, category, age, deadline) and a "first contact" badge on a draft to a recipient the
project has never written to nor heard from."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

import httpx
from playwright.async_api import Page, expect
from stack.launcher import MONOLITH, Stack
from stack.topology import SERVICES

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


_CALLS = re.compile(r"^reviewloop_rpc_server_duration\w*_count\{([^}]*)\} (\S+)$", re.M)


async def _rpc_calls(stack: Stack) -> int:
    """Every gRPC call the services have served, but for the outbox's deliveries between them (Ingest)
    and health checks: what a page's requests cost."""
    total = 0.0
    # A monolith is one process with one set of instruments: each part's metrics address serves them all.
    parts = SERVICES[:1] if MONOLITH in stack.procs else SERVICES
    async with httpx.AsyncClient() as client:
        for name in parts:
            text = (
                await client.get(f"http://{stack.env[f'REVIEWLOOP_{name.upper()}_METRICS_ADDR']}/metrics")
            ).text
            for labels, value in _CALLS.findall(text):
                if "Ingest" not in labels and "Health" not in labels:
                    total += float(value)
    return int(total)


async def _cost(stack: Stack, page: Page, path: str) -> int:
    before = await _rpc_calls(stack)
    answered = await page.request.get(path)
    assert answered.status == 200, await answered.text()
    return await _rpc_calls(stack) - before


async def test_a_pages_service_calls_do_not_grow_with_the_queue(
    capi: Api, console_stack: Stack, new_page: Any
) -> None:
    """The queue and the review page make the same number of service calls for 3 pending drafts as for
    12 (the review page once listed the whole pending queue twice)."""
    p = await _project(capi)
    created = await capi.http.post(
        f"/v1/admin/projects/{p['project_id']}/categories", json={"name": "sized"}, headers=capi.admin
    )
    category = created.json()["id"]
    first = await submit(capi, p["agent"], category_id=category)
    for _ in range(2):
        await submit(capi, p["agent"], to=[f"x-{uuid.uuid4().hex[:6]}@acme.com"])
    page: Page = await new_page()
    await sign_in(page, p["human"])
    await page.goto("about:blank")  # no live stream polling while the calls are counted
    small = [
        await _cost(console_stack, page, path) for path in ("/console/queue", f"/console/reviews/{first}")
    ]
    for _ in range(9):
        await submit(capi, p["agent"], category_id=category, to=[f"y-{uuid.uuid4().hex[:6]}@acme.com"])
    large = [
        await _cost(console_stack, page, path) for path in ("/console/queue", f"/console/reviews/{first}")
    ]
    assert large == small, (small, large)
    assert all(0 < calls <= 12 for calls in small), small
