"""The admin pages are thin clients of the REST routes' commands (issue 38): a verb done in the console
reads back through the gateway's REST route as that route would have done it, and a value the route's body
refuses is refused on the page with the route's own words, changing nothing."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.conftest import Api
from tests.console.test_console import _project, sign_in

HEAD = "e" * 40


async def _get(api: Api, path: str, headers: dict[str, str]) -> dict[str, Any]:
    response = await api.http.get(path, headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_pacing_set_on_the_settings_page_reads_back_and_the_routes_range_refuses(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    admin = capi.auth(p["admin"])
    pacing = f"/v1/admin/projects/{p['project_id']}/pacing"
    page = await new_page()
    await sign_in(page, p["admin"], "/console/settings")
    await page.locator("#pacing-lookahead_window").fill("4")
    await page.locator("#pacing-rework_batch_max").fill("")  # blank: back to the default
    await page.get_by_role("button", name="Save pacing").click()
    await expect(page.get_by_role("status").first).to_contain_text("pacing saved")
    saved = await _get(capi, pacing, admin)
    assert (saved["lookahead_window"], saved["rework_batch_max"]) == (4, 10), saved

    # PUT .../pacing refuses a window over 100 (PacingSettingsIn); the console says so and writes nothing.
    await page.locator("#pacing-lookahead_window").fill("500")
    await page.get_by_role("button", name="Save pacing").click()
    await expect(page.get_by_role("alert")).to_contain_text(
        "/lookahead_window: Input should be less than or equal to 100"
    )
    await expect(page.locator("#pacing-lookahead_window")).to_have_value("500")
    assert await _get(capi, pacing, admin) == saved


async def test_a_contact_blocked_and_unblocked_on_the_page_reads_back_from_the_contacts_route(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    admin = capi.auth(p["admin"])
    contacts = f"/v1/admin/projects/{p['project_id']}/contacts"
    page = await new_page()
    await sign_in(page, p["admin"], "/console/settings")
    await page.get_by_label("Address").fill("pat@example.com")
    await page.get_by_role("button", name="Block", exact=True).click()
    await expect(page.get_by_role("status").first).to_contain_text("contact saved")
    listed = (await _get(capi, contacts, admin))["contacts"]
    assert [(c["address"], c["blocked"], c["suppressed"]) for c in listed] == [
        ("pat@example.com", True, False)
    ]

    await page.get_by_label("Address").fill("not an address")
    await page.get_by_role("button", name="Suppress", exact=True).click()
    await expect(page.get_by_role("alert")).to_contain_text("/address: String should match pattern")
    await expect(page.get_by_label("Address")).to_have_value("not an address")
    assert (await _get(capi, contacts, admin))["contacts"] == listed

    await page.get_by_role("button", name="Unblock pat@example.com").click()
    await expect(page.get_by_role("status").first).to_contain_text("unblocked")
    assert (await _get(capi, contacts, admin))["contacts"] == []


async def test_an_extension_granted_on_the_budgets_page_is_the_routes_grant(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    admin = capi.auth(p["admin"])
    run = await capi.http.put(
        "/v1/review-rounds/runs/run_ext",
        json={"repository": "acme/api", "pr_number": 7, "head_sha": HEAD},
        headers=admin,
    )
    assert run.status_code == 200, run.text
    budget = "/v1/review-rounds/budget?run_id=run_ext"
    before = await _get(capi, budget, admin)
    page = await new_page()
    await sign_in(page, p["admin"], "/console/budgets?run_id=run_ext")
    await expect(page.get_by_text("No extension granted.")).to_be_visible()

    # ExtendIn takes a full commit sha: a short one is the route's 422, and nothing is granted.
    await page.get_by_label("Approved head (commit sha)").fill("eeee")
    await page.get_by_label("Scope brief").fill("retry the flake fix only")
    await page.get_by_role("button", name="Grant extension").click()
    await expect(page.get_by_role("alert")).to_contain_text("/head_sha: String should match pattern")
    await expect(page.get_by_label("Scope brief")).to_have_value("retry the flake fix only")
    assert await _get(capi, budget, admin) == before

    await page.get_by_label("Approved head (commit sha)").fill(HEAD)
    await page.get_by_role("button", name="Grant extension").click()
    await expect(page.get_by_text(f"→ {before['limit'] + 1} at head {HEAD}")).to_be_visible()
    extension = (await _get(capi, budget, admin))["extension"]
    assert (extension["prior_limit"], extension["new_limit"], extension["approved_head"]) == (
        before["limit"],
        before["limit"] + 1,
        HEAD,
    )
    assert extension["scope_brief"] == "retry the flake fix only"
    assert extension["origin"]["actor_kind"] == "admin"


async def test_a_category_created_and_a_dial_value_set_on_the_pages_read_back_through_rest(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    agent = capi.auth(p["agent"])
    page = await new_page()
    await sign_in(page, p["admin"], "/console/categories")
    await page.get_by_label("Name").fill("renewals")
    await page.get_by_label("Description").fill("Renewal reminders")
    await page.get_by_role("button", name="Create category").click()
    await expect(page.get_by_role("status").first).to_contain_text("category created")
    listed = (await _get(capi, "/v1/categories", agent))["items"]
    assert [(c["name"], c["description"], c["author_kind"]) for c in listed] == [
        ("renewals", "Renewal reminders", "human")
    ]

    await page.goto("/console/settings")
    await page.locator("#dial-account-min_confidence").fill("1.5")
    await page.get_by_role("button", name="Save account values").click()
    await expect(page.get_by_role("alert")).to_contain_text(
        "/account/min_confidence: Input should be less than or equal to 1"
    )
    dial = (await _get(capi, "/v1/risk-dial", agent))["account"]
    await page.locator("#dial-account-min_confidence").fill("0.9")
    await page.get_by_role("button", name="Save account values").click()
    await expect(page.get_by_role("status").first).to_contain_text("risk dial saved")
    assert (await _get(capi, "/v1/risk-dial", agent))["account"] == {**dial, "min_confidence": 0.9}
