"""The console's "Dead letters" page (issue 13) in a real browser: an event nudge refused for good shows
with the reason; once nudge is fixed the admin retries it from the page and the agent gets it once."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import expect
from stack.launcher import Stack

from tests.conftest import Api
from tests.console.test_console import _project, axe_clean, sign_in, submit
from tests.e2e.helpers import events_until
from tests.e2e.test_dead_letters import broken_nudge, gauge_until


@pytest.mark.microservices_only("swaps nudge alone for a broken one, then back")
async def test_admin_retries_a_dead_letter_from_the_console(
    capi: Api, console_stack: Stack, new_page: Any
) -> None:
    p = await _project(capi)
    review_id = await submit(capi, p["agent"])
    console_stack.stop("nudge")
    async with broken_nudge(console_stack.address("nudge")):
        cancelled = await capi.http.post(
            f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=capi.auth(p["agent"])
        )
        assert cancelled.status_code == 200, cancelled.text
        await gauge_until(console_stack, 1)
    console_stack.start("nudge")
    await console_stack.wait_serving(["nudge"])

    page = await new_page()
    await sign_in(page, p["admin"], "/console/dead-letters")
    letters = page.get_by_role("table", name="Dead letters, newest first")
    row = letters.locator("tr", has_text=review_id)
    await expect(row).to_contain_text("review_state → nudge")
    await expect(row).to_contain_text("INVALID_ARGUMENT: event payload does not parse")
    await axe_clean(page, "dead-letters")
    await row.get_by_role("button", name="Retry").click()
    await expect(page.get_by_role("status").first).to_contain_text("dead letter retried")
    await expect(page.get_by_text("No dead letters.")).to_be_visible()

    events = await events_until(capi, capi.auth(p["agent"]), 1)
    assert [(e["review_id"], e["reason"]) for e in events] == [(review_id, "cancelled")], events
    await gauge_until(console_stack, 0)
