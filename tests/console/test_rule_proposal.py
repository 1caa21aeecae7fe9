"""Save-as-rule from an edit (issue 38), in headless Chromium: before the rule is saved, the edit's preview
proposes the rule text from the words the edit changed, names the rules it may conflict with and the
pending drafts it would hold (by intent). An agent asks the same question of the same command over REST."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.conftest import INTENT, Api
from tests.console.test_console import _category, _project, axe_clean, sign_in, submit

PROPOSED = "Write “Can you do a call on Thursday” instead of “Let me know your thoughts”."


async def test_a_rule_from_an_edit_is_proposed_checked_and_its_reach_named_before_it_is_saved(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    agent = capi.auth(p["agent"])
    category = await _category(capi, p["project_id"], "renewals")
    existing = await capi.http.post(
        "/v1/rules",
        json={"rule_text": "Never propose a call on Thursday.", "scope": "category", "category_id": category},
        headers=agent,
    )
    assert existing.status_code == 201, existing.text
    draft = await submit(capi, p["agent"], category_id=category)
    for summary in ("Renew Globex before March", "Renew Initech seats"):
        await submit(capi, p["agent"], category_id=category, intent={**INTENT, "summary": summary})
    await submit(capi, p["agent"], intent={**INTENT, "summary": "Uncategorised follow-up"})

    page = await new_page()
    await sign_in(page, p["human"], f"/console/reviews/{draft}")
    await page.get_by_role("button", name="Open for review").click()
    await page.get_by_text("Edit inline").click()
    await page.get_by_label("Body").fill("Can you do a call on Thursday?")
    await page.get_by_role("button", name="Preview edit").click()

    panel = page.locator("#rule-proposal")
    await expect(panel).to_contain_text("Text: Let me know your thoughts. → Can you do a call on Thursday?")
    await expect(panel.locator("#rule-proposed")).to_have_text(f"Proposed from your edit: {PROPOSED}")
    # Nothing is filled in for the reviewer: a rule is saved only when they ask for one.
    text = panel.get_by_label("Rule the agent applies next time")
    await expect(text).to_have_value("")
    await expect(panel.locator("#rule-held")).to_contain_text("Saving it holds 3 other pending drafts")

    await panel.get_by_label("this draft's category").check()
    await panel.get_by_role("button", name="Use the proposed rule").click()
    panel = page.locator("#rule-proposal")
    await expect(panel.get_by_label("Rule the agent applies next time")).to_have_value(PROPOSED)
    await expect(panel.get_by_label("this draft's category")).to_be_checked()
    await expect(panel.locator("#rule-conflicts")).to_contain_text(
        "Never propose a call on Thursday. (category rule, rev 1): may contradict it"
    )
    held = panel.locator("#rule-held")
    await expect(held).to_contain_text("Saving it holds 2 other pending drafts")
    await expect(held.get_by_role("link")).to_have_text(["Renew Globex before March", "Renew Initech seats"])
    await axe_clean(page, "rule-proposal")

    await page.get_by_role("button", name="Save edit and approve").click()
    await expect(page.locator("#live")).to_contain_text("Edited and approved")
    rules = await capi.http.get("/v1/rules", params={"category_id": category}, headers=agent)
    assert PROPOSED in [r["rule_text"] for r in rules.json()["items"]]

    # The agent's question, the same command: the rule just saved now says the same.
    other = (await capi.http.get("/v1/reviews", params={"category_id": category}, headers=agent)).json()
    pending = next(r["id"] for r in other["items"] if r["id"] != draft and r["state"] == "needs_review")
    answer = await capi.http.post(
        f"/v1/reviews/{pending}/rule-preview",
        json={"body": "Can you do a call on Thursday?", "scope": "category", "rule_text": PROPOSED},
        headers=agent,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["proposed_text"] == PROPOSED and body["rule_text"] == PROPOSED
    assert body["changes"] == [
        {
            "field": "body_text",
            "op": "replace",
            "before": "Let me know your thoughts.",
            "after": "Can you do a call on Thursday?",
        }
    ]
    kinds = {c["rule"]["rule_text"]: c["kind"] for c in body["conflicts"]}
    assert kinds == {PROPOSED: "duplicate", "Never propose a call on Thursday.": "contradiction"}
    assert body["held_count"] == 1 and body["held"][0]["review_id"] != pending
    refused = await capi.http.post(
        f"/v1/reviews/{pending}/rule-preview", json={"body": "x", "scope": "everyone"}, headers=agent
    )
    assert refused.status_code == 422, refused.text
    house = await capi.http.post(
        f"/v1/reviews/{pending}/rule-preview", json={"body": "x", "scope": "house"}, headers=agent
    )
    assert house.status_code == 403, house.text
