"""The reviewer console end to end in headless Chromium (issue 16)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page, expect

from tests.conftest import Api, draft
from tests.console.conftest import shot


async def _project(api: Api) -> dict[str, Any]:
    """A project with an agent key, a human key and an admin key."""
    project = await api.project()
    keys = {kind: (await api.key(project["project_id"], kind))["api_key"] for kind in ("agent", "human", "admin")}
    return {**project, **keys}


async def sign_in(page: Page, key: str, path: str = "/console/queue") -> None:
    await page.goto(path)
    await page.get_by_label("Human or admin API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()


async def submit(api: Api, agent_key: str, **overrides: Any) -> str:
    response = await api.http.post("/v1/messages", json=draft(**overrides), headers=api.auth(agent_key))
    assert response.status_code == 202, response.text
    return str(response.json()["review_id"])


async def test_sign_in_and_queue(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    first = await submit(capi, p["agent"], subject="first")
    page = await new_page()
    await sign_in(page, p["human"])
    await expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    await expect(page.locator(f"#row-{first}")).to_contain_text("Re-engage cold lead")
    await shot(page, "queue")
