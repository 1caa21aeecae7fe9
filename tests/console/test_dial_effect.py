"""The risk dial shows its effect before it is changed (issue 38), in headless Chromium: the categories page
shows each category's clean-approval streak and edit rate, and the what-if page replays the category's last
drafts under the dial in force and under the values the admin types. An agent asks the same question of
the same command over REST."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.conftest import Api
from tests.console.test_console import _approve_by_api, _category, _project, axe_clean, sign_in, submit

CONFIDENCES = (0.5, 0.6, 0.75, 0.8, 0.9, 0.95)


async def _decide(api: Api, human_key: str, review_id: str, action: str) -> None:
    if action == "approve":
        await _approve_by_api(api, human_key, review_id)
        return
    human = api.auth(human_key)
    opened = (
        await api.http.post(
            f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
        )
    ).json()
    decided = await api.http.post(
        f"/v1/reviews/{review_id}/decision",
        json={
            "action": "edit",
            "revision": opened["revision"],
            "version": opened["version"],
            "subject": "Q3 pilot",
            "body": "Can you do Thursday 2pm?",
        },
        headers=human,
    )
    assert decided.status_code == 200, decided.text


async def _category_with_history(capi: Api, p: dict[str, Any]) -> str:
    """A category with no canary and no first-contact gate (so the replay is exact), six drafts of the
    confidences above, the oldest decided by edit and the two newest by clean approvals."""
    category = await _category(capi, p["project_id"], "renewals")
    dial = await capi.http.put(
        f"/v1/admin/projects/{p['project_id']}/risk-dial",
        json={
            "categories": [
                {
                    "category_id": category,
                    "canary_rate": 0,
                    "first_contact_gate": False,
                    "min_confidence": 0.7,
                }
            ]
        },
        headers=capi.admin,
    )
    assert dial.status_code == 200, dial.text
    drafts = [
        await submit(capi, p["agent"], category_id=category, confidence=c, to=[f"lead{n}@acme.com"])
        for n, c in enumerate(CONFIDENCES)
    ]
    for review_id, action in zip(drafts[3:], ("edit", "approve", "approve"), strict=True):
        await _decide(capi, p["human"], review_id, action)
    return category


async def test_admin_sees_what_a_stricter_dial_would_have_held_before_changing_it(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    category = await _category_with_history(capi, p)

    page = await new_page()
    await sign_in(page, p["admin"], "/console/categories")
    row = page.locator(f"#category-{category}")
    await expect(row).to_contain_text("clean-approval streak 2; edit rate 33% of 3 decisions")
    await row.get_by_role("link", name="What a dial change would do to renewals").click()

    await expect(page.get_by_role("heading", name="Of the last 6 drafts")).to_be_visible()
    threshold = page.get_by_label("Minimum confidence (0 to 1)")
    await expect(threshold).to_have_value("0.7")
    effect = page.locator("#dial-effect")
    in_force = effect.get_by_role("row", name="Dial in force")
    await expect(in_force).to_contain_text("4")
    await expect(in_force).to_contain_text("2 (2 confidence below the minimum)")
    await expect(page.locator("#graduation-record")).to_contain_text(
        "clean-approval streak 2; edit rate 33% of 3 decisions"
    )

    await threshold.fill("0.85")
    await page.get_by_label("Auto-sends per day").fill("1")
    await page.get_by_role("button", name="Show the effect").click()
    proposed = page.locator("#dial-effect").get_by_role("row", name="Proposed dial")
    await expect(proposed).to_contain_text("5 (1 daily auto-send cap spent; 4 confidence below the minimum)")
    await expect(page.get_by_label("Minimum confidence (0 to 1)")).to_have_value("0.85")
    await axe_clean(page, "dial-effect")

    # A value out of range is refused on the page, the figures stay those of the dial in force, and what
    # the admin typed is kept.
    await page.get_by_label("Minimum confidence (0 to 1)").fill("1.5")
    await page.get_by_role("button", name="Show the effect").click()
    await expect(page.get_by_role("alert")).to_contain_text("min_confidence: must be between 0 and 1")
    await expect(page.get_by_label("Minimum confidence (0 to 1)")).to_have_value("1.5")
    await axe_clean(page, "dial-effect-refused")

    # An API client's what-if is the same command: the same figures. The dial is human authority, so an
    # agent key reads the dial in force (get_risk_dial) but asks no what-if.
    agent = capi.auth(p["agent"])
    refused = await capi.http.get(f"/v1/categories/{category}/dial-effect", headers=agent)
    assert refused.status_code == 403, refused.text
    human = capi.auth(p["human"])
    answer = await capi.http.get(
        f"/v1/categories/{category}/dial-effect",
        params={"min_confidence": 0.85, "auto_send_cap_per_day": 1},
        headers=human,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["considered"] == 6
    assert body["current"]["auto_sent"] == 4 and body["current"]["held"] == {"low_confidence": 2}
    assert body["proposed"]["auto_sent"] == 1
    assert body["proposed"]["held"] == {"daily_cap": 1, "low_confidence": 4}
    assert body["proposed"]["dial"]["min_confidence"] == 0.85
    assert (body["decided"], body["clean_streak"]) == (3, 2)
    refused = await capi.http.get(
        f"/v1/categories/{category}/dial-effect", params={"canary_rate": 2}, headers=human
    )
    assert refused.status_code == 422, refused.text
    missing = await capi.http.get("/v1/categories/cat_00000000000000000000000000/dial-effect", headers=human)
    assert missing.status_code == 404, missing.text
