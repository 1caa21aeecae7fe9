"""Escalation goes somewhere, in the browser (issue 38): reviewer A escalates a draft to B with a
deadline from the review page's picker; B signs in and finds it first in the queue, under "Escalated to
me" with its count, with the deadline shown; B's address got the mail through the SMTP relay. An
escalation past its deadline is in the queue's "Overdue" split, counted."""

from __future__ import annotations

import asyncio
import email
from datetime import UTC, datetime, timedelta
from email.policy import default
from typing import Any

from playwright.async_api import expect
from reviewloop.storage import make_engine
from sqlalchemy import text

from tests.conftest import Api
from tests.console.conftest import Relay
from tests.console.test_console import _project, axe_clean, sign_in, submit


async def _key(api: Api, project_id: str, kind: str, name: str, address: str = "") -> dict[str, Any]:
    body = {
        "project_id": project_id,
        "actor_kind": kind,
        "name": name,
        **({"email": address} if address else {}),
    }
    issued = await api.http.post("/v1/admin/api-keys", json=body, headers=api.admin)
    assert issued.status_code == 201, issued.text
    return dict(issued.json())


async def test_a_escalates_to_b_with_a_deadline_and_b_sees_it_first(
    capi: Api, new_page: Any, relay: Relay
) -> None:
    p = await _project(capi)
    pid = p["project_id"]
    alice = await _key(capi, pid, "human", "alice")
    bob = await _key(capi, pid, "human", "bob", "bob@example.com")
    older = await submit(capi, p["agent"], subject="older one")
    rid = await submit(capi, p["agent"], subject="pricing exception")
    before = len(relay.received)

    page = await new_page()
    await sign_in(page, alice["api_key"], f"/console/reviews/{rid}")
    await page.get_by_role("button", name="Open for review").click()
    await page.locator("#escalate-panel summary").click()
    await page.get_by_label("Why (optional)").fill("Pricing needs bob's sign-off.")
    await page.get_by_label("Escalate to").select_option(label="bob (human)")
    due = (datetime.now() + timedelta(days=1)).replace(second=0, microsecond=0)
    await page.get_by_label("Deadline (optional, your local time)").fill(due.strftime("%Y-%m-%dT%H:%M"))
    await axe_clean(page, "review-escalate-form")
    await page.get_by_role("button", name="Escalate", exact=True).click()
    await page.wait_for_url("**/console/**done=escalate**")

    other = await new_page()
    await sign_in(other, bob["api_key"])
    mine = other.locator('[data-split="mine"]')
    await expect(mine).to_have_text("Escalated to me (1)")
    first = other.locator("tr.row").first
    await expect(first).to_have_id(f"row-{rid}")
    await expect(first.locator(".badge.escalated")).to_have_text("escalated to bob")
    await expect(first.locator("td.deadline time")).to_have_text("in 23 h")
    await expect(other.locator(f"#row-{older}")).to_be_visible()
    await mine.click()
    await expect(other.locator("tr.row")).to_have_count(1)
    await expect(other.locator('.splits [aria-current="page"]')).to_have_text("Escalated to me (1)")
    await axe_clean(other, "queue-escalated-to-me")
    await other.locator(f"#row-{rid} a.summary").click()
    await expect(other.locator("#escalation")).to_contain_text("Escalated to bob by alice (human)")

    # A reviewer it was not escalated to sees it escalated, not theirs.
    third = await new_page()
    await sign_in(third, p["human"])
    await expect(third.locator('[data-split="mine"]')).to_have_text("Escalated to me (0)")

    async with asyncio.timeout(20):
        while len(relay.received) == before:  # noqa: ASYNC110 - the relay sink exposes no event
            await asyncio.sleep(0.05)
    recipients, raw = relay.received[-1]
    assert recipients == ["bob@example.com"]
    mail = email.message_from_bytes(raw, policy=default)
    assert mail["Subject"].startswith("Escalated to you: ")
    text = mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert "Subject: pricing exception" in text and f"/console/reviews/{rid}" in text


async def _deadline_passes(api: Api, review_id: str) -> None:
    """The clock passing the escalation's deadline, without a wait: review_state's stored one moves back."""
    engine = make_engine(api.stack.env["REVIEWLOOP_REVIEW_STATE_DB"])
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE reviews SET escalation_deadline = :past WHERE id = :id"),
                {"past": datetime.now(UTC) - timedelta(hours=2), "id": review_id},
            )
    finally:
        await engine.dispose()


async def test_an_escalation_past_its_deadline_is_in_the_overdue_split(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    human = capi.auth(p["human"])
    late, due, plain = [await submit(capi, p["agent"], subject=s) for s in ("late", "due tomorrow", "plain")]
    for rid in (late, due):
        opened = await capi.http.post(
            f"/v1/reviews/{rid}/open", json={"revision": 1, "version": 1}, headers=human
        )
        assert opened.status_code == 200, opened.text
        escalated = await capi.http.post(
            f"/v1/reviews/{rid}/decision",
            json={
                "action": "escalate",
                "revision": 1,
                "version": opened.json()["version"],
                "feedback": "legal",
                "escalation_deadline": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
            },
            headers=human,
        )
        assert escalated.status_code == 200, escalated.text
    await _deadline_passes(capi, late)

    page = await new_page()
    await sign_in(page, p["human"])
    split = page.locator('[data-split="overdue"]')
    await expect(split).to_have_text("Overdue (1)")
    await expect(page.locator('[data-split="escalated"]')).to_have_text("Escalated (2)")
    await expect(page.locator(f"#row-{late} td.deadline")).to_have_text("2 h ago overdue")
    await expect(page.locator(f"#row-{due} td.deadline .badge.overdue")).to_have_count(0)
    await split.click()
    await expect(page.locator('.splits [aria-current="page"]')).to_have_text("Overdue (1)")
    await expect(page.locator("tr.row")).to_have_count(1)
    await expect(page.locator(f"#row-{late}")).to_be_visible()
    await expect(page.locator(f"#row-{plain}")).to_have_count(0)
    await axe_clean(page, "queue-overdue")
