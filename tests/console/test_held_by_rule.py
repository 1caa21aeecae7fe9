"""A draft a rule holds (issue 38): after a reviewer saves a general rule from an edit, the other pending
drafts it reaches wait for their agent to re-apply the rules. The queue and the review page say which and
why, and a human approves one as it stands with an explicit confirmation, recorded on the decision turn."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from playwright.async_api import expect

from tests.conftest import Api
from tests.console.test_console import _project, axe_clean, outcome, review, save_edit, sign_in, submit


async def test_a_held_draft_is_marked_and_approved_as_it_stands(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    first = await submit(capi, p["agent"], subject="first")
    held = await submit(capi, p["agent"], subject="second")
    page = await new_page()
    await sign_in(page, p["human"])
    await page.goto(f"/console/reviews/{first}")
    await page.get_by_role("button", name="Open for review").click()
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
    await page.get_by_text("Edit inline").click()
    await page.get_by_label("Body").fill("Would Thursday at 2pm work for a 20-minute call?")
    await page.get_by_label("Rule the agent applies next time").fill("Offer a time, never ask for one.")
    # Said before the rule is saved: what it does to the other drafts it reaches.
    await expect(page.locator("#rule-holds")).to_contain_text(
        "they wait for their agent to re-apply the rules"
    )
    await save_edit(page)
    await expect(page.locator("#live")).to_have_text(outcome("Edited and approved", first))

    # The queue marks the held draft (the rule's event reaches review_state through the outbox).
    deadline = time.monotonic() + 20
    row = page.locator(f"#row-{held}")
    while True:
        await page.goto("/console/queue")
        if await row.get_by_text("held by a rule").count():
            break
        assert time.monotonic() < deadline, "the queue never marked the held draft"
        await asyncio.sleep(0.5)
    await axe_clean(page, "queue-held")

    await page.goto(f"/console/reviews/{held}")
    await page.get_by_role("button", name="Open for review").click()
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
    panel = page.locator("#held")
    await expect(panel).to_contain_text("waiting for its agent to re-apply the rules")
    await expect(panel).to_contain_text("Offer a time, never ask for one.")
    await axe_clean(page, "review-held")
    # Held for real: an approve that does not override it is refused born_stale.
    now = await review(capi, p["human"], held)
    plain = await capi.http.post(
        f"/v1/reviews/{held}/decision",
        json={"action": "approve", "revision": now["revision"], "version": now["version"]},
        headers=capi.auth(p["human"]),
    )
    assert (plain.status_code, plain.json()["code"]) == (409, "born_stale"), plain.text
    approve = page.get_by_role("button", name="Approve as it stands")
    await approve.click()  # unconfirmed: the browser keeps the form (the checkbox is required)
    assert (await review(capi, p["agent"], held))["state"] == "in_review"
    await page.get_by_label("I approve this draft as it stands").check()
    await approve.click()
    await expect(page.locator("#live")).to_have_text(outcome("Approved", held))
    done = await review(capi, p["human"], held)
    assert done["state"] in ("approved", "sent"), done["state"]
    await page.goto(f"/console/reviews/{held}")
    await expect(page.locator("body")).to_contain_text("overriding the rule hold")
