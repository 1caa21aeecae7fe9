"""The review page's save-as-rule scope choice in headless Chromium: house style (an admin's; a reviewer
sees why not, and a forged pick is refused on the page), this project, this category, this agent."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from playwright.async_api import Page, expect

from tests.conftest import Api
from tests.console.test_console import _project, axe_clean, outcome, save_edit, sign_in, submit


async def _saved_rule(api: Api, agent_key: str, text: str) -> dict[str, Any]:
    """The rule saying ``text`` on the agent's ladder, once the decision's outbox delivered it."""
    deadline = time.monotonic() + 20
    while True:
        rules = (await api.http.get("/v1/rules", headers=api.auth(agent_key))).json()["items"]
        found = [r for r in rules if r["rule_text"] == text]
        if found:
            return dict(found[0])
        assert time.monotonic() < deadline, f"no rule {text!r} was saved"
        await asyncio.sleep(0.2)


async def _edit_with_rule(page: Page, review_id: str, rule_text: str) -> None:
    await page.goto(f"/console/reviews/{review_id}")
    await page.get_by_role("button", name="Open for review").click()
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
    await page.get_by_text("Edit inline").click()
    await page.get_by_label("Body").fill("Would Thursday at 2pm work for a 20-minute call?")
    await page.get_by_label("Rule the agent applies next time").fill(rule_text)


async def test_a_reviewer_saves_a_rule_for_this_agent_and_cannot_set_house_style(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    first = await submit(capi, p["agent"], subject="first")
    second = await submit(capi, p["agent"], subject="second")
    page = await new_page()
    await sign_in(page, p["human"])
    await _edit_with_rule(page, first, "Sign off as Sam from the pilot team.")
    house = page.get_by_role("radio", name="house style")
    await expect(house).to_be_disabled()
    await expect(page.get_by_text("only an admin sets house style")).to_be_visible()
    this_agent = page.get_by_role("radio", name="this agent")
    await expect(page.get_by_text("only (reaches 2 pending drafts)")).to_be_visible()
    await this_agent.check()
    await axe_clean(page, "review-rule-scopes")
    await save_edit(page)
    await expect(page.locator("#live")).to_have_text(outcome("Edited and approved", first))
    rule = await _saved_rule(capi, p["agent"], "Sign off as Sam from the pilot team.")
    agent_id = (await capi.http.get(f"/v1/reviews/{first}", headers=capi.auth(p["agent"]))).json()["agent_id"]
    assert (rule["rule_layer"], rule["scope"], rule["scope_agent_id"]) == ("project", "general", agent_id)

    # A forged house-style pick (the radio enabled by hand) is refused on the page: nothing is decided,
    # and what the reviewer typed is kept.
    await _edit_with_rule(page, second, "Never use exclamation marks anywhere.")
    await page.evaluate("document.getElementById('rule-scope-house').disabled = false")
    await house.check()
    await save_edit(page)
    await expect(page.get_by_role("alert")).to_contain_text("takes an admin key")
    await expect(page.get_by_label("Rule the agent applies next time")).to_have_value(
        "Never use exclamation marks anywhere."
    )
    await expect(page.get_by_label("Body")).to_have_value("Would Thursday at 2pm work for a 20-minute call?")
    still = (await capi.http.get(f"/v1/reviews/{second}", headers=capi.auth(p["agent"]))).json()
    assert still["state"] == "in_review"


async def test_an_admin_saves_an_edit_as_house_style(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    review_id = await submit(capi, p["agent"], subject="house")
    page = await new_page()
    await sign_in(page, p["admin"])
    await _edit_with_rule(page, review_id, "Write dates as 3 March 2027, never 3/3/27.")
    house = page.get_by_role("radio", name="house style")
    await expect(house).to_be_enabled()
    await house.check()
    await save_edit(page)
    await expect(page.locator("#live")).to_have_text(outcome("Edited and approved", review_id))
    rule = await _saved_rule(capi, p["agent"], "Write dates as 3 March 2027, never 3/3/27.")
    assert (rule["rule_layer"], rule["scope"], rule.get("project_id")) == ("org", "general", None)
