"""Issue 38, "who did it", in headless Chromium: every turn, decision and presence line names the key's
name and its kind (an admin's reject once read "by human", and the header showed a key id)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.conftest import Api
from tests.console.test_console import axe_clean, sign_in, submit


async def _named_key(api: Api, project_id: str, kind: str, name: str) -> str:
    response = await api.http.post(
        "/v1/admin/api-keys",
        json={"project_id": project_id, "actor_kind": kind, "name": name},
        headers=api.admin,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["api_key"])


async def test_every_turn_decision_and_presence_line_names_the_key_and_its_kind(
    capi: Api, new_page: Any
) -> None:
    project = (await capi.project())["project_id"]
    agent = await _named_key(capi, project, "agent", "outreach-bot")
    human = await _named_key(capi, project, "human", "sam-reviewer")
    admin = await _named_key(capi, project, "admin", "ada-admin")
    rid = await submit(capi, agent, subject="who did it")

    sam = await new_page()
    await sign_in(sam, human, f"/console/reviews/{rid}")
    await expect(sam.get_by_text("Signed in as sam-reviewer (human key)")).to_be_visible()
    await sam.get_by_role("button", name="Open for review").click()
    await expect(sam.locator("#live")).to_have_text("Opened for review; you have it now.")
    chat = await capi.http.post(
        f"/v1/reviews/{rid}/chat", json={"text": "Is Thursday fine?"}, headers=capi.auth(agent)
    )
    assert chat.status_code in (200, 201), chat.text

    ada = await new_page()
    await sign_in(ada, admin, f"/console/reviews/{rid}")
    await expect(ada.get_by_text("Signed in as ada-admin (admin key)")).to_be_visible()
    await expect(ada.locator("#presence")).to_have_text("Also open by sam-reviewer (human).")
    thread = ada.get_by_role("region", name="Thread and chat")
    await expect(thread).to_contain_text("opened by sam-reviewer (human)")
    await expect(thread).to_contain_text("by outreach-bot (agent)")
    await ada.locator("#reject-panel summary").click()
    await ada.get_by_label("Feedback (the agent gets it verbatim)").fill("Not this quarter.")
    await ada.get_by_role("button", name="Reject").click()

    # Sam's page still shows the draft as it was; the approve is refused, naming who decided.
    await expect(sam.locator("#presence")).to_have_text("Also open by ada-admin (admin).", timeout=30_000)
    await sam.get_by_role("button", name="Approve").click()
    alert = sam.get_by_role("alert")
    await expect(alert).to_contain_text("decision (reject) by ada-admin (admin)")
    await expect(sam.get_by_role("region", name="Thread and chat")).to_contain_text(
        "decision (reject) by ada-admin (admin)"
    )
    await axe_clean(sam, "review-who-did-it")
