"""The console's "Review sequence" page (spec 003's shared picker, issue 35) in a real browser: an admin
adds rows, picks model and effort, sets WARM/COLD, is told which row cannot be saved and why, fixes it,
saves, and the run's sequence reads back through the REST API as saved."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.conftest import Api
from tests.console.test_console import _project, axe_clean, sign_in

CODEX = {
    "name": "codex",
    "models": ["gpt-5", "gpt-5-mini"],
    "efforts": ["high", "low"],
    "default_model": "gpt-5",
    "default_effort": "high",
}
# One effort only (not adjustable), and no session adapter for WARM.
SOLO = {
    "name": "solo",
    "models": ["m1"],
    "efforts": ["medium"],
    "default_model": "m1",
    "default_effort": "medium",
    "supports_warm": False,
}


async def test_admin_edits_and_saves_a_runs_review_sequence(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    admin = capi.auth(p["admin"])
    for runner in (CODEX, SOLO):
        registered = await capi.http.post("/v1/review-rounds/runners", json=runner, headers=admin)
        assert registered.status_code == 201, registered.text
    created = await capi.http.put(
        "/v1/review-rounds/runs/run_pick",
        json={"review_sequence": [{"runner": "codex", "mode": "cold"}]},
        headers=admin,
    )
    assert created.status_code == 200, created.text

    page = await new_page()
    await sign_in(page, p["admin"], "/console/sequence?run_id=run_pick")
    first = page.get_by_role("group", name="Row 1 (also the pipeline review)")
    await expect(first.get_by_label("Runner")).to_have_value("codex")
    await expect(first.get_by_label("Model", exact=True)).to_have_value("gpt-5")
    await expect(first.get_by_label("Effort")).to_have_value("high")  # beside the model
    await expect(first.get_by_label("COLD")).to_be_checked()

    # Row 2: the runner's defaults named, a model and an effort picked, WARM.
    await page.get_by_role("button", name="Add a row").click()
    second = page.get_by_role("group", name="Row 2")
    await expect(second.get_by_label("Model", exact=True)).to_contain_text("runner default (gpt-5)")
    await expect(second.get_by_label("COLD")).to_be_checked()  # the run resolves to COLD
    await second.get_by_label("Model", exact=True).select_option("gpt-5-mini")
    await second.get_by_label("Effort").select_option("low")
    await second.get_by_label("WARM").check()

    # Row 3 on a runner without adjustable effort: its default is said explicitly; WARM is offered on
    # every row, and refused for this runner with the row named.
    await page.get_by_role("button", name="Add a row").click()
    third = page.get_by_role("group", name="Row 3")
    await third.get_by_label("Runner").select_option("solo")
    await third.get_by_label("WARM").check()
    await page.get_by_role("button", name="Check the rows").click()
    third = page.get_by_role("group", name="Row 3")
    await expect(third).to_contain_text("solo has no adjustable effort; it runs at medium (its default).")
    await expect(third.get_by_role("alert")).to_contain_text("mode: solo cannot continue a WARM session")
    await expect(page.get_by_role("group", name="Row 2").get_by_label("WARM")).to_be_checked()  # kept
    await axe_clean(page, "sequence-picker-invalid")
    await page.get_by_role("button", name="Save the sequence").click()
    await expect(page.get_by_role("alert").first).to_contain_text("fix the rows marked below")
    unchanged = await capi.http.get("/v1/review-rounds/runs/run_pick", headers=admin)
    assert unchanged.json()["review_sequence"] == [
        {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "cold"}
    ]

    # Fixed: COLD, then saved through RecordRun; the REST API reads back what the page showed.
    await page.get_by_role("group", name="Row 3").get_by_label("COLD").check()
    await page.get_by_role("button", name="Save the sequence").click()
    await expect(page.get_by_role("status").first).to_contain_text("sequence saved")
    await expect(page.get_by_role("group", name="Row 3").get_by_label("Runner")).to_have_value("solo")
    await axe_clean(page, "sequence-picker-saved")
    saved = await capi.http.get("/v1/review-rounds/runs/run_pick", headers=capi.auth(p["human"]))
    assert saved.status_code == 200, saved.text
    assert saved.json()["review_sequence"] == [
        {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "cold"},
        {"runner": "codex", "model": "gpt-5-mini", "effort": "low", "mode": "warm"},
        {"runner": "solo", "model": "m1", "effort": "medium", "mode": "cold"},
    ]

    # Reordering: row 3 moved up to row 2, saved, read back in the new order.
    await page.get_by_role("button", name="Move row 3 up").click()
    await page.get_by_role("button", name="Save the sequence").click()
    await expect(page.get_by_role("status").first).to_contain_text("sequence saved")
    moved = await capi.http.get("/v1/review-rounds/runs/run_pick", headers=admin)
    assert [r["runner"] for r in moved.json()["review_sequence"]] == ["codex", "solo", "codex"]
