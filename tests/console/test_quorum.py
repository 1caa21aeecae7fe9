"""A category's quorum in the console (issue 19): the admin sets it on the settings page, and the
review page says how many approvals of the current revision stand, of how many, and whose."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.conftest import Api
from tests.console.test_console import axe_clean, outcome, review, sign_in, submit


async def test_the_review_page_shows_two_of_three_approvals_of_a_panel_and_who_gave_them(
    capi: Api, new_page: Any
) -> None:
    project_id = (await capi.project())["project_id"]
    keys = {
        name: await capi.key(project_id, kind)
        for name, kind in (("agent", "agent"), ("admin", "admin"), ("c", "human"))
    }
    for name, key_name in (("a", "Ana Reviewer"), ("b", "Ben Reviewer")):  # named keys read by name
        issued = await capi.http.post(
            "/v1/admin/api-keys",
            json={"project_id": project_id, "actor_kind": "human", "name": key_name},
            headers=capi.admin,
        )
        assert issued.status_code == 201, issued.text
        keys[name] = issued.json()
    created = await capi.http.post(
        f"/v1/admin/projects/{project_id}/categories", json={"name": "renewals"}, headers=capi.admin
    )
    category = created.json()["id"]

    admin = await new_page()
    await sign_in(admin, keys["admin"]["api_key"], "/console/settings")
    await admin.get_by_text("Overrides for renewals", exact=True).click()
    await admin.locator(f"#dial-{category}-quorum_approvals").fill("3")
    await admin.locator(f"#dial-{category}-quorum_panel").fill("4")
    await admin.get_by_role("button", name="Save overrides for renewals").click()
    await expect(admin.get_by_role("status").first).to_contain_text("risk dial saved")
    await expect(admin.locator("table").first.locator("tbody tr").nth(1)).to_contain_text("3 (override)")

    rid = await submit(capi, keys["agent"]["api_key"], category_id=category)
    a, b = capi.auth(keys["a"]["api_key"]), capi.auth(keys["b"]["api_key"])
    current = await review(capi, keys["a"]["api_key"], rid)
    opened = await capi.http.post(
        f"/v1/reviews/{rid}/open", json={"revision": 1, "version": current["version"]}, headers=a
    )
    for headers in (a, b):
        now = await review(capi, keys["a"]["api_key"], rid)
        approved = await capi.http.post(
            f"/v1/reviews/{rid}/decision",
            json={"action": "approve", "revision": now["revision"], "version": now["version"]},
            headers=headers,
        )
        assert approved.status_code == 200, approved.text
    assert opened.status_code == 200

    page = await new_page()
    await sign_in(page, keys["c"]["api_key"], f"/console/reviews/{rid}")
    quorum = page.locator("#quorum")
    await expect(quorum).to_contain_text("2 of 3 approvals (panel of 4)")
    await expect(quorum).to_contain_text("approved by Ana Reviewer (human), Ben Reviewer (human)")
    await axe_clean(page, "review-quorum")
    await page.get_by_role("button", name="Approve", exact=True).click()
    await expect(page.locator("#live")).to_have_text(outcome("Approved", rid))
    assert (await review(capi, keys["c"]["api_key"], rid))["state"] in ("approved", "sent")
