"""Console round 2 in headless Chromium: each category's backlog pacing and "Merge into…" on the
Categories page, the review policy's account default beside the project override on Settings, and a
refused admin form answering its page again with what was typed kept."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from playwright.async_api import expect

from tests.conftest import Api
from tests.console.test_console import _category, _project, axe_clean, sign_in, submit


async def _pacing_once_stale(api: Api, agent: dict[str, str], category_id: str, stale: int) -> dict[str, Any]:
    """The category's pacing state once the rule's outbox reached review_state and ``stale`` drafts
    are stale."""
    deadline = time.monotonic() + 20
    while True:
        pacing = dict((await api.http.get(f"/v1/categories/{category_id}/pacing", headers=agent)).json())
        if pacing["stale"] == stale:
            return pacing
        assert time.monotonic() < deadline, pacing
        await asyncio.sleep(0.2)


async def test_categories_show_pacing_and_merge_into_another_keeping_the_rationale(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    agent, admin = capi.auth(p["agent"]), capi.auth(p["admin"])
    renewals = await _category(capi, p["project_id"], "renewals")
    outreach = await _category(capi, p["project_id"], "outreach")
    spare = await _category(capi, p["project_id"], "spare")
    drafts = [await submit(capi, p["agent"], category_id=renewals) for _ in range(2)]
    rule = await capi.http.post(
        "/v1/rules",
        json={"rule_text": "Name the renewal date.", "scope": "category", "category_id": renewals},
        headers=agent,
    )
    assert rule.status_code == 201, rule.text
    pacing = await _pacing_once_stale(capi, agent, renewals, 2)  # both drafts predate the new rule

    page = await new_page()
    await sign_in(page, p["admin"], "/console/categories")
    row = page.locator(f"#category-{renewals}")
    await expect(row.locator("td.pacing")).to_contain_text(
        f"2 pending; 2 stale against rule high-water {pacing['rule_high_water']}; "
    )
    await expect(row.locator("td.pacing")).to_contain_text("in the window (nudged, of 3); next:")
    await row.get_by_text("Merge renewals into…").click()
    await expect(row).to_contain_text("Moves 1 category rule and 2 pending drafts")
    await row.get_by_label("Category that stays").select_option(label="outreach")
    why = row.get_by_label("Rationale (why both describe the same purpose)")
    await why.fill("Renewal mail is outreach to existing customers.")
    await axe_clean(page, "categories-pacing-merge")

    # Meanwhile outreach itself is merged away: this merge is refused, and the page keeps the rationale.
    elsewhere = await capi.http.post(
        f"/v1/categories/{outreach}/merge",
        json={"into_category_id": spare, "rationale": "same purpose"},
        headers=admin,
    )
    assert elsewhere.status_code == 200, elsewhere.text
    await row.get_by_role("button", name="Merge renewals").click()
    await expect(page.get_by_role("alert")).to_contain_text("Refused:")
    await expect(page.get_by_role("heading", name="Categories")).to_be_visible()
    await expect(why).to_have_value("Renewal mail is outreach to existing customers.")
    await axe_clean(page, "categories-merge-refused")
    await row.get_by_label("Category that stays").select_option(label="spare")
    await row.get_by_role("button", name="Merge renewals").click()
    await expect(page.get_by_role("status").first).to_contain_text(
        "renewals merged into spare: 1 rules moved, 0 retired as twins"
    )
    await expect(page.locator(f"#category-{renewals}")).to_have_count(0)
    merged = (await capi.http.get(f"/v1/categories/{renewals}", headers=agent)).json()
    assert merged["merged_into"] == spare
    for rid in drafts:
        moved = (await capi.http.get(f"/v1/reviews/{rid}", headers=agent)).json()
        assert moved["category_id"] == spare


async def test_settings_show_the_account_default_beside_the_override_and_keep_refused_input(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    agent = capi.auth(p["agent"])
    page = await new_page()
    await sign_in(page, p["admin"], "/console/settings")
    in_force = page.locator("#policy-in-force")
    await expect(in_force).to_contain_text("In force: require_review (from floor)")
    await page.get_by_label("Account default").select_option("allow_direct")
    await page.get_by_role("button", name="Save account default").click()
    await expect(page.get_by_role("status").first).to_contain_text("account default saved")
    await expect(in_force).to_contain_text("In force: allow_direct (from account default)")
    assert (await capi.http.get("/v1/review-policy", headers=agent)).json() == {
        "policy": "allow_direct",
        "source": "account default",
        "require_composition_token": False,
    }
    await page.get_by_label("This project's override").select_option("require_review")
    await page.get_by_role("button", name="Save this project's override").click()
    await expect(in_force).to_contain_text("In force: require_review (from override)")
    await expect(page.get_by_label("Account default")).to_have_value("allow_direct")
    await expect(page.locator("label[for=policy-account]")).to_contain_text("allow_direct")
    await expect(page.locator("label[for=policy-project]")).to_contain_text("require_review")
    await axe_clean(page, "settings-review-policy")

    # A refused setting form answers the Settings page again with what was typed, in that form only.
    await page.locator("#dial-account-min_confidence").fill("very")
    await page.locator("#pacing-rework_batch_max").fill("7")
    await page.get_by_role("button", name="Save account values").click()
    await expect(page.get_by_role("alert")).to_contain_text(
        "/account/min_confidence: Input should be a valid number"
    )
    await expect(page.locator("#dial-account-min_confidence")).to_have_value("very")
    await expect(page.locator("#pacing-rework_batch_max")).to_have_value("10")  # not the refused form's
    await page.locator("#pacing-lookahead_window").fill("two")
    await page.get_by_role("button", name="Save pacing").click()
    await expect(page.get_by_role("alert")).to_contain_text(
        "/lookahead_window: Input should be a valid integer"
    )
    await expect(page.locator("#pacing-lookahead_window")).to_have_value("two")
    await expect(page.locator("#dial-account-min_confidence")).not_to_have_value("very")
    dial = (await capi.http.get("/v1/risk-dial", headers=agent)).json()
    assert dial["account"].get("min_confidence") != "very"  # nothing was written


async def test_a_stale_rule_action_is_refused_on_the_rules_page(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    agent = capi.auth(p["agent"])
    saved = await capi.http.post(
        "/v1/rules", json={"rule_text": "Never promise a discount.", "scope": "general"}, headers=agent
    )
    assert saved.status_code == 201, saved.text
    page = await new_page()
    await sign_in(page, p["admin"], "/console/rules")
    ladder = page.get_by_role("table", name="Effective ladder, in the order a draft applies it")
    await expect(ladder).to_contain_text("Never promise a discount.")
    # The agent changes the rule after the page was read: the page's undo names a rev no longer current.
    retired = await capi.http.post(
        f"/v1/rules/{saved.json()['lineage_id']}/retire", json={"rev": saved.json()["rev"]}, headers=agent
    )
    assert retired.status_code == 200, retired.text
    await ladder.get_by_role("button", name="Undo last change").click()
    await expect(page.get_by_role("alert")).to_contain_text("Refused:")
    await expect(page.get_by_role("heading", name="Rules", exact=True)).to_be_visible()
    await expect(page.get_by_text("No rules in force.")).to_be_visible()
    await axe_clean(page, "rules-refused")


async def test_the_graduation_lock_is_set_and_lifted_from_the_categories_page(
    capi: Api, new_page: Any
) -> None:
    """The lock goes through the same update_category command as PATCH /v1/admin/categories/{id}."""
    p = await _project(capi)
    agent = capi.auth(p["agent"])
    renewals = await _category(capi, p["project_id"], "renewals")
    page = await new_page()
    await sign_in(page, p["admin"], "/console/categories")
    row = page.locator(f"#category-{renewals}")
    await row.get_by_role("button", name="Never graduate renewals").click()
    await expect(
        page.locator(f"#category-{renewals}").get_by_role("button", name="Allow graduation of renewals")
    ).to_be_visible()
    status = (await capi.http.get(f"/v1/categories/{renewals}/graduation", headers=agent)).json()
    assert status["never_graduate"] is True, status
    await axe_clean(page, "categories-graduation-lock")
    await (
        page.locator(f"#category-{renewals}")
        .get_by_role("button", name="Allow graduation of renewals")
        .click()
    )
    await expect(
        page.locator(f"#category-{renewals}").get_by_role("button", name="Never graduate renewals")
    ).to_be_visible()
    status = (await capi.http.get(f"/v1/categories/{renewals}/graduation", headers=agent)).json()
    assert status["never_graduate"] is False, status
