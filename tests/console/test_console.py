"""The reviewer console end to end in headless Chromium (issue 16): one stack per module, one fresh
project per test, a screenshot of every page under tests/console/output/ and an axe-core scan of each."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from axe_playwright_python.async_playwright import Axe  # type: ignore[import-untyped]
from playwright.async_api import Page, expect

from tests.conftest import Api, draft
from tests.console.conftest import shot
from tests.e2e.helpers import auto_notify_category, events_until
from tests.e2e.test_delivery_smtp import Relay


async def _project(api: Api) -> dict[str, Any]:
    """A project with an agent key, a human key and an admin key."""
    project = await api.project()
    keys = {
        kind: (await api.key(project["project_id"], kind))["api_key"] for kind in ("agent", "human", "admin")
    }
    return {**project, **keys}


async def _category(api: Api, project_id: str, name: str) -> str:
    response = await api.http.post(
        f"/v1/admin/projects/{project_id}/categories", json={"name": name}, headers=api.admin
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def sign_in(page: Page, key: str, path: str = "/console/queue") -> None:
    await page.goto(path)
    await page.get_by_label("Human or admin API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()


async def submit(api: Api, agent_key: str, **overrides: Any) -> str:
    response = await api.http.post("/v1/messages", json=draft(**overrides), headers=api.auth(agent_key))
    assert response.status_code == 202, response.text
    return str(response.json()["review_id"])


async def review(api: Api, key: str, review_id: str) -> dict[str, Any]:
    response = await api.http.get(f"/v1/reviews/{review_id}", headers=api.auth(key))
    assert response.status_code == 200, response.text
    return dict(response.json())


def outcome(verb: str, review_id: str) -> re.Pattern[str]:
    """What the page says (and shows as a toast) after a decision: the verb, the draft's intent, its id."""
    return re.compile(rf"^{verb} \u201c.+\u201d \({review_id}\)\.$")


async def save_edit(page: Page) -> None:
    """An edit is previewed (the exact message, every part, its digest) before it is saved and approved."""
    await page.get_by_role("button", name="Preview edit").click()
    await expect(page.get_by_role("heading", name="What will be delivered")).to_be_visible()
    await page.get_by_role("button", name="Save edit and approve").click()


async def axe_clean(page: Page, name: str) -> None:
    """No serious or critical axe-core violation on ``page``; its screenshot is written as well."""
    await shot(page, name)
    results = await Axe().run(page)
    bad = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert not bad, f"{name}: " + "; ".join(
        f"{v['id']}: {v['help']} ({[n['target'] for n in v['nodes']][:3]})" for v in bad
    )


async def test_edit_saved_as_category_rule_then_approved(capi: Api, new_page: Any) -> None:
    """A human opens the oldest draft, edits it, saves the edit as a category rule and approves: the
    agent's terminal `sent` nudge says `decision: edited` and get_rules shows the rule."""
    p = await _project(capi)
    category = await _category(capi, p["project_id"], "pilot outreach")
    oldest = await submit(capi, p["agent"], subject="Q3 pilot", category_id=category)
    await submit(capi, p["agent"], subject="later one", category_id=category)
    await submit(capi, p["agent"], subject="uncategorised")
    page = await new_page()
    await sign_in(page, p["human"])
    await expect(page.locator("tr.row")).to_have_count(3)
    await page.get_by_label("Category").select_option(label="pilot outreach")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("tr.row")).to_have_count(2)
    await expect(page.locator("tr.row").first).to_contain_text("pilot outreach")
    await page.locator("tr.row a").first.click()
    await expect(page).to_have_url(f"/console/reviews/{oldest}")
    await page.get_by_role("button", name="Open for review").click()
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
    await page.get_by_text("Edit inline").click()
    await page.get_by_label("Body").fill("Would Thursday at 2pm work for a 20-minute call?")
    await page.get_by_label("Rule the agent applies next time").fill("Always propose one concrete time slot.")
    await page.get_by_label("category").check()
    await expect(page.get_by_text("every draft of this project (reaches 3 pending drafts)")).to_be_visible()
    await expect(page.get_by_text("category pilot outreach (reaches 2 pending drafts)")).to_be_visible()
    await shot(page, "review-edit")
    await save_edit(page)
    await expect(page.locator("#live")).to_have_text(outcome("Edited and approved", oldest))

    agent = capi.auth(p["agent"])
    deadline = time.monotonic() + 20
    sent: list[dict[str, Any]] = []
    while not sent and time.monotonic() < deadline:
        events = await events_until(capi, agent, 1)
        sent = [e for e in events if e.get("review_id") == oldest and e["reason"] == "sent"]
        await asyncio.sleep(0.2)
    assert sent and sent[0]["payload"]["decision"] == "edited", sent
    rules = await capi.http.get("/v1/rules", params={"category_id": category}, headers=agent)
    assert "Always propose one concrete time slot." in [r["rule_text"] for r in rules.json()["items"]]


async def test_stale_click_refused_visibly_keeping_what_was_typed(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    rid = await submit(capi, p["agent"])
    first = await new_page()
    await sign_in(first, p["human"], f"/console/reviews/{rid}")
    await first.get_by_role("button", name="Open for review").click()
    second = await new_page(first.context)  # a second tab of the same reviewer
    await second.goto(f"/console/reviews/{rid}")
    # The first tab comments (a new version); the second tab's reject names the version it showed.
    await first.get_by_label("Comment to the agent").fill("Is Thursday firm?")
    await first.get_by_role("button", name="Send comment").click()
    await second.locator("#reject-panel summary").click()
    await second.get_by_label("Feedback (the agent gets it verbatim)").fill("Too pushy; soften the ask.")
    await second.get_by_role("button", name="Reject").click()
    alert = second.get_by_role("alert")
    await expect(alert).to_contain_text("Refused: this draft changed since you loaded it")
    await expect(alert).to_contain_text("human_comment")
    await expect(second.get_by_label("Feedback (the agent gets it verbatim)")).to_have_value(
        "Too pushy; soften the ask."
    )
    await shot(second, "review-stale-refused")
    # Now the first tab approves; the second tab's approve (of the version it showed) is refused.
    await first.goto(f"/console/reviews/{rid}")
    await first.get_by_role("button", name="Approve").click()
    await second.get_by_role("button", name="Approve").click()
    await expect(second.get_by_role("alert")).to_contain_text("it is now revision 1")
    assert (await review(capi, p["agent"], rid))["state"] in ("approved", "sent")


async def test_invisible_characters_and_lookalike_domain_flagged(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    hits: list[bytes] = []  # a tracking-pixel server: the HTML part must never reach it

    async def pixel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(await reader.readline())
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    tracker = await asyncio.start_server(pixel, "127.0.0.1", 0)
    port = tracker.sockets[0].getsockname()[1]
    rid = await submit(
        capi,
        p["agent"],
        to=["vp@acme.com", "cfo@acrne.com"],
        subject="Q3\u200b pilot",
        body_text="Pay to the new account\u202e below.",
        body_html='<p>Hello</p><p style="display:none">wire funds</p><img src="http://127.0.0.1:{port}/t.png">'.replace(
            "{port}", str(port)
        ),
    )
    page = await new_page()
    await sign_in(page, p["human"], f"/console/reviews/{rid}")
    panel = page.get_by_role("region", name="Warnings: what the rendered mail hides")
    await expect(panel).to_contain_text("subject: zero-width character U+200B ZERO WIDTH SPACE")
    await expect(panel).to_contain_text("bidi control U+202E")
    await expect(panel).to_contain_text("recipient domain acrne.com looks like acme.com")
    await expect(panel).to_contain_text("HTML part hides text")
    await expect(page.frame_locator("iframe.html-part").get_by_text("Hello")).to_be_visible()
    frame = await (await page.locator("iframe.html-part").element_handle()).content_frame()
    assert frame is not None
    await frame.wait_for_load_state("load")  # after its images loaded or were refused
    tracker.close()
    assert hits == []  # the HTML part loads nothing remote (tracking pixels included)
    await axe_clean(page, "review-warnings")


async def test_whole_review_by_keyboard(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    first = await submit(capi, p["agent"], subject="first")
    second = await submit(capi, p["agent"], subject="second")
    page = await new_page()
    await page.goto("/console/queue")
    await page.keyboard.type(p["human"])  # the key field has focus on the sign-in page
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    await page.keyboard.press("?")
    await expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
    await page.keyboard.press("Escape")
    await page.keyboard.press("j")
    await page.keyboard.press("o")
    await expect(page).to_have_url(f"/console/reviews/{first}")
    await page.keyboard.press("o")  # pick it up
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")
    await page.keyboard.press("r")
    feedback = page.get_by_label("Feedback (the agent gets it verbatim)")
    await expect(feedback).to_be_focused()
    await page.keyboard.type("a shorter ask, please")  # 'a' while typing is text, not approve
    await expect(feedback).to_have_value("a shorter ask, please")
    await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    # Focus moves to the next draft and the outcome is announced.
    await expect(page).to_have_url(f"/console/reviews/{second}?done=reject&prev={first}")
    await expect(page.locator("#live")).to_have_text(outcome("Rejected", first))
    await expect(page.locator("main")).to_be_focused()
    assert (await review(capi, p["agent"], first))["state"] == "rejected"
    # A reviewer can turn single-key shortcuts off.
    await page.keyboard.press("?")
    await page.get_by_label("Single-key shortcuts on").uncheck()
    await page.keyboard.press("Escape")
    await page.keyboard.press("o")
    await expect(page.get_by_role("button", name="Open for review")).to_be_visible()
    assert (await review(capi, p["agent"], second))["state"] == "needs_review"


async def test_admin_flips_risk_dial_and_graduates_a_category(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    page = await new_page()
    await sign_in(page, p["admin"], "/console/categories")
    await page.get_by_label("Name").fill("renewals")
    await page.get_by_role("button", name="Create category").click()
    await expect(page.get_by_role("status").first).to_contain_text("category created")
    # The maturity gate is unmet (no clean approvals yet): the graduate is refused where the admin sees it.
    await page.get_by_role("button", name="Graduate renewals to auto_notify").click()
    await expect(page.get_by_role("alert")).to_contain_text("needs 20 clean approvals (has 0)")
    await page.goto("/console/settings")
    await page.locator("#dial-account-min_confidence").fill("0.9")
    await page.locator("#dial-account-graduate_min_approvals").fill("0")
    await page.locator("#dial-account-graduate_min_age_hours").fill("0")
    await page.get_by_role("button", name="Save account values").click()
    await expect(page.get_by_role("status").first).to_contain_text("risk dial saved")
    dial = page.locator("table").first
    await expect(dial).to_contain_text("0.9")
    # A category override shows as such; the other values are inherited from the account.
    await page.get_by_text("Overrides for renewals", exact=True).click()
    await page.locator("[id^=dial-cat_][id$=-min_confidence]").fill("0.95")
    await page.get_by_role("button", name="Save overrides for renewals").click()
    renewals = dial.locator("tbody tr").nth(1)
    await expect(renewals).to_contain_text("0.95 (override)")
    await expect(renewals.locator("td").nth(2)).to_have_text("3 (inherited)")
    # Backlog pacing sits beside the dial: the admin narrows the look-ahead window.
    await expect(page.locator("#pacing-lookahead_window")).to_have_value("3")
    await page.locator("#pacing-lookahead_window").fill("2")
    await page.get_by_role("button", name="Save pacing").click()
    await expect(page.get_by_role("status").first).to_contain_text("pacing saved")
    await expect(page.locator("#pacing-lookahead_window")).to_have_value("2")
    await axe_clean(page, "settings")
    # With the gate opened on the dial, the admin graduates the category.
    await page.goto("/console/categories")
    await page.get_by_role("button", name="Graduate renewals to auto_notify").click()
    await expect(page.get_by_role("status").first).to_contain_text("category graduated")
    await expect(page.locator("tbody tr").first).to_contain_text("auto_notify")
    await axe_clean(page, "categories")
    response = await capi.http.get("/v1/risk-dial", headers=capi.auth(p["agent"]))
    assert response.status_code == 200, response.text
    assert response.json()["account"]["min_confidence"] == 0.9


async def test_deep_link_opens_the_draft_after_sign_in(capi: Api, new_page: Any, base_url: str) -> None:
    p = await _project(capi)
    rid = await submit(capi, p["agent"])
    page = await new_page()
    await page.goto(f"/console/reviews/{rid}")
    await expect(page).to_have_url(f"/console/sign-in?next=%2Fconsole%2Freviews%2F{rid}")
    await axe_clean(page, "sign-in")
    await page.get_by_label("Human or admin API key").fill(p["human"])
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(f"/console/reviews/{rid}")
    # From another site (mail, chat): only the Lax read cookie travels, and it still opens the draft.
    await page.set_content(f'<a href="{base_url}/console/reviews/{rid}">the draft</a>')
    await page.get_by_role("link", name="the draft").click()
    await expect(page.get_by_role("button", name="Open for review")).to_be_visible()
    # ...and a write from the console itself is same-site again.
    await page.get_by_role("button", name="Open for review").click()
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")


async def test_authority_agent_keys_and_other_tenants(capi: Api, new_page: Any) -> None:
    p, other = await _project(capi), await _project(capi)
    foreign = await submit(capi, other["agent"])
    page = await new_page()
    await sign_in(page, p["agent"])
    await expect(page.get_by_role("alert")).to_contain_text("cannot sign in to the console")
    await page.get_by_label("Human or admin API key").fill(p["human"])
    await page.get_by_role("button", name="Sign in").click()
    response = await page.goto(f"/console/reviews/{foreign}")
    assert response is not None and response.status == 404
    response = await page.goto("/console/settings")
    assert response is not None and response.status == 403
    # A write without the session's CSRF token changes nothing.
    forged = await page.request.post("/console/sign-out", form={"csrf": "forged"})
    assert forged.status == 403
    await page.goto("/console/queue")
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.goto("/console/queue")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


async def test_queue_is_live_and_every_page_is_accessible(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    decided_elsewhere = await submit(capi, p["agent"], subject="one")
    page = await new_page()
    await sign_in(page, p["admin"])
    await expect(page.locator(f"#row-{decided_elsewhere}")).to_be_visible()
    await axe_clean(page, "queue")
    await submit(capi, p["agent"], subject="two")
    await expect(page.locator("#new-bar")).to_have_text("1 new — show")
    assert await page.locator("tr.row").count() == 1  # new drafts wait behind the bar
    cancelled = await capi.http.post(
        f"/v1/reviews/{decided_elsewhere}/cancel", json={"parent_revision": 1}, headers=capi.auth(p["agent"])
    )
    assert cancelled.status_code == 200, cancelled.text
    await expect(page.locator(f"#row-{decided_elsewhere}")).to_have_class("row decided")
    await shot(page, "queue-live")
    await page.locator("#new-bar").click()
    await expect(page.locator("tr.row")).to_have_count(1)
    await page.locator("tr.row a").first.click()
    await axe_clean(page, "review")
    for name in ("rules", "budgets"):
        await page.goto(f"/console/{name}")
        await axe_clean(page, name)
    await page.keyboard.press("?")
    await axe_clean(page, "shortcuts-overlay")


async def test_admin_reads_a_run_budget_and_grants_an_extension(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    reviewer = capi.auth((await capi.key(p["project_id"], "review_agent"))["api_key"])
    head = "e" * 40
    run = await capi.http.put(
        "/v1/review-rounds/runs/run_console",
        json={"repository": "acme/api", "pr_number": 7, "head_sha": head},
        headers=reviewer,
    )
    assert run.status_code == 200, run.text
    page = await new_page()
    await sign_in(page, p["admin"], "/console/budgets")
    await page.get_by_label("Run id").fill("run_console")
    await page.get_by_role("button", name="Show the review-round budget").click()
    await expect(page.locator("dl.meta")).to_contain_text("0/5")
    await page.get_by_label("Approved head (commit sha)").fill(head)
    await page.get_by_label("Scope brief").fill("retry flake fix only")
    await page.get_by_role("button", name="Grant extension").click()
    await expect(page.get_by_role("status").first).to_contain_text("extension granted")
    await expect(page.locator("dl.meta")).to_contain_text("0/6")
    await expect(page.get_by_text("5 → 6")).to_be_visible()
    await axe_clean(page, "budgets-run")


async def test_admin_approves_a_proposed_rule_and_reads_its_history(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    settings = await capi.http.put(
        f"/v1/admin/projects/{p['project_id']}/rule-settings",
        json={"write_approval": True},
        headers=capi.admin,
    )
    assert settings.status_code == 200, settings.text
    saved = await capi.http.post(
        "/v1/rules",
        json={"rule_text": "Never promise a discount.", "scope": "general"},
        headers=capi.auth(p["agent"]),
    )
    assert saved.status_code == 201 and saved.json()["status"] == "proposed", saved.text
    page = await new_page()
    await sign_in(page, p["admin"], "/console/rules")
    proposed = page.get_by_role("table", name="Proposed rules")
    await expect(proposed).to_contain_text("Never promise a discount.")
    await shot(page, "rules-proposed")
    await proposed.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status").first).to_contain_text("rule approve done")
    ladder = page.get_by_role("table", name="Effective ladder, in the order a draft applies it")
    await expect(ladder).to_contain_text("Never promise a discount.")
    await ladder.get_by_text("History").click()
    await expect(ladder.locator("details li")).to_have_count(2)
    rules = await capi.http.get("/v1/rules", headers=capi.auth(p["agent"]))
    assert "Never promise a discount." in [r["rule_text"] for r in rules.json()["items"]]


async def _approve_by_api(api: Api, human_key: str, review_id: str) -> dict[str, Any]:
    human = api.auth(human_key)
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200, opened.text
    decided = await api.http.post(
        f"/v1/reviews/{review_id}/decision",
        json={
            "action": "approve",
            "revision": opened.json()["revision"],
            "version": opened.json()["version"],
        },
        headers=human,
    )
    assert decided.status_code == 200, decided.text
    return dict(decided.json())


async def test_parked_delivery_shown_and_resolved_by_an_admin_from_the_page(
    capi: Api, new_page: Any, relay: Relay
) -> None:
    """The relay takes the message and drops before its answer: the send parks. The review page shows
    where it stands; a human cannot close it, an admin marks it delivered with the evidence."""
    p = await _project(capi)
    rid = await submit(capi, p["agent"])
    relay.drop_after_data = True
    try:
        decided = await _approve_by_api(capi, p["human"], rid)
    finally:
        relay.drop_after_data = False
    assert decided["state"] == "approved"
    parked = await review(capi, p["agent"], rid)
    assert parked["delivery"]["status"] == "send_needs_reconciliation"

    human = await new_page()
    await sign_in(human, p["human"], f"/console/reviews/{rid}")
    status = human.locator("#delivery-status")
    await expect(status).to_contain_text("send_needs_reconciliation")
    await expect(status).to_contain_text("Parked at")
    await expect(human.get_by_role("button", name="Mark delivered")).to_have_count(0)

    admin = await new_page()
    await sign_in(admin, p["admin"], f"/console/reviews/{rid}")
    await expect(admin.get_by_role("button", name="Mark failed")).to_be_visible()
    sent_before = len(relay.received)
    await axe_clean(admin, "review-delivery-parked")
    await admin.get_by_label("Reason (the evidence; kept with the review)").fill(
        "relay log: 250 queued as 4F2A"
    )
    await admin.get_by_role("button", name="Mark delivered").click()
    await expect(admin.locator("#live")).to_have_text("Delivery closed; the resolution is recorded.")
    await expect(admin.locator("#delivery-status")).to_contain_text("delivered")
    await expect(admin.locator("#delivery-status")).to_contain_text("relay log: 250 queued as 4F2A")
    await expect(admin.get_by_role("button", name="Mark delivered")).to_have_count(0)
    after = await review(capi, p["agent"], rid)
    assert after["state"] == "sent" and after["delivery"]["status"] == "delivered"
    assert len(relay.received) == sent_before  # closed by evidence, never resent


async def test_an_auto_notify_send_is_a_line_in_the_queue(capi: Api, new_page: Any) -> None:
    """A category graduated to auto_notify auto-sends a confident draft: the humans watching the queue
    get it live under what went out without review (no reload); a draft held for review waits behind
    the "new" bar of the pending table only."""
    p = await _project(capi)
    category = await auto_notify_category(capi, p["project_id"])
    page = await new_page()
    await sign_in(page, p["human"])
    await expect(page.get_by_text("Nothing was auto-sent in an auto_notify category.")).to_be_visible()
    await page.evaluate("window.loadedOnce = true")  # gone if the page reloads

    sent = await submit(capi, p["agent"], subject="renewal sent", category_id=category, confidence=0.9)
    held = await submit(capi, p["agent"], subject="renewal held", category_id=category, confidence=0.2)
    assert (await review(capi, p["agent"], sent))["state"] in ("auto_sent", "sent")
    auto = page.locator("tr.auto-row")
    await expect(auto).to_have_count(1)
    await expect(auto.first).to_have_id(f"auto-{sent}")
    await expect(auto.first).to_contain_text("renewals")
    await expect(auto.first).to_contain_text("vp@acme.com")
    await expect(page.get_by_text("Nothing was auto-sent in an auto_notify category.")).to_be_hidden()
    await expect(page.locator("#live")).to_contain_text("Sent without review")
    await expect(page.locator("#new-bar")).to_have_text("1 new — show")
    assert await page.evaluate("window.loadedOnce === true")
    await axe_clean(page, "queue-auto-notify-live")

    await page.reload()
    await expect(auto).to_have_count(1)
    await expect(page.locator(f"#row-{held}")).to_have_count(1)
    await expect(page.locator(f"#row-{sent}")).to_have_count(0)
    await axe_clean(page, "queue-auto-notify")


async def _named_key(api: Api, project_id: str, name: str) -> str:
    response = await api.http.post(
        "/v1/admin/api-keys",
        json={"project_id": project_id, "actor_kind": "human", "name": name},
        headers=api.admin,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["api_key"])


async def test_two_reviewers_see_who_has_a_draft_open(capi: Api, new_page: Any) -> None:
    """Ana opens a draft; Ben's queue shows it open by Ana (live), his review page says so, and Ana's
    page learns Ben joined as soon as she returns to it."""
    p = await _project(capi)
    ana_key = await _named_key(capi, p["project_id"], "Ana")
    ben_key = await _named_key(capi, p["project_id"], "Ben")
    first = await submit(capi, p["agent"])
    second = await submit(capi, p["agent"])

    ana = await new_page()
    await sign_in(ana, ana_key, f"/console/reviews/{first}")
    await expect(ana.locator("#presence")).to_have_text("Nobody else has this draft open.")

    ben_queue = await new_page()
    await sign_in(ben_queue, ben_key)
    await expect(ben_queue.locator(f"#row-{first} .open-by")).to_have_text("Ana (human)")
    await expect(ben_queue.locator(f"#row-{second} .open-by")).to_have_text("")
    await ana.goto(f"/console/reviews/{second}")  # the queue learns it live
    await expect(ben_queue.locator(f"#row-{second} .open-by")).to_have_text("Ana (human)")
    await axe_clean(ben_queue, "queue-open-by")

    ben = await new_page(ben_queue.context)
    await ben.goto(f"/console/reviews/{second}")
    await expect(ben.locator("#presence")).to_have_text("Also open by Ana (human).")
    await ana.evaluate("window.dispatchEvent(new Event('focus'))")
    await expect(ana.locator("#presence")).to_have_text("Also open by Ben (human).")


async def test_review_page_compares_any_two_revisions(capi: Api, new_page: Any) -> None:
    """Issue 16: the revision history compares revisions 1 and 3 field by field, each changed line
    marked - or + in text, not by colour alone."""
    p = await _project(capi)
    rid = await submit(capi, p["agent"], subject="Q3 pilot", body_text="Can we talk Monday?")
    agent = capi.auth(p["agent"])
    for parent, change in ((1, {"body_text": "Can we talk Tuesday?"}), (2, {"subject": "Q3 pilot call"})):
        redrafted = await capi.http.post(
            f"/v1/reviews/{rid}/revisions", json={"parent_revision": parent, **change}, headers=agent
        )
        assert redrafted.status_code == 200, redrafted.text
    page = await new_page()
    await sign_in(page, p["human"], f"/console/reviews/{rid}")
    history = page.locator("section[aria-labelledby=history]")
    await expect(history).to_contain_text("Revision 2 (-) against revision 3 (+)")  # the default pair
    await page.get_by_label("From (-)").select_option("1")
    await page.get_by_label("To (+)").select_option("3")
    await page.get_by_role("button", name="Compare").click()
    await expect(history).to_contain_text("Revision 1 (-) against revision 3 (+)")
    diff = history.locator("pre.diff")
    await expect(diff).to_contain_text("- Q3 pilot")
    await expect(diff).to_contain_text("+ Q3 pilot call")
    await expect(diff).to_contain_text("- Can we talk Monday?")
    await expect(diff).to_contain_text("+ Can we talk Tuesday?")
    await axe_clean(page, "review-revisions")


async def test_admin_rejects_one_graduation_proposal_and_approves_the_next(capi: Api, new_page: Any) -> None:
    """The Categories page lists the proposals waiting for a human with approve and reject: a rejection
    keeps the category on its rung and its agent reads the reason verbatim; an approval graduates it."""
    p = await _project(capi)
    pid, agent = p["project_id"], capi.auth(p["agent"])
    category = await _category(capi, pid, "renewals")
    proposals = f"/v1/categories/{category}/graduation-proposals"
    made = await capi.http.post(proposals, json={"note": "clean for weeks"}, headers=agent)
    assert made.status_code == 201, made.text
    [first] = (await capi.http.get(proposals, headers=agent)).json()["proposals"]

    page = await new_page()
    await sign_in(page, p["admin"], "/console/categories")
    row = page.locator(f"#proposal-{first['id']}")
    await expect(row).to_contain_text("supervised → auto_notify")
    await expect(row).to_contain_text("clean for weeks")
    await axe_clean(page, "categories-proposals")
    await row.get_by_text("Reject…").click()
    await row.get_by_label("Reason (the agent reads it verbatim)").fill("Wait for the Q3 pricing change.")
    await row.get_by_role("button", name="Reject the proposal for renewals").click()
    await expect(page.get_by_role("status").first).to_contain_text("proposal rejected")
    await expect(page.locator("[id^=proposal-]")).to_have_count(0)
    await expect(page.locator("tbody tr").first).to_contain_text("supervised")
    seen = (await capi.http.get(proposals, headers=agent)).json()["proposals"]
    assert [(x["status"], x["reason"]) for x in seen] == [("rejected", "Wait for the Q3 pricing change.")]

    assert (await capi.http.post(proposals, json={"note": "and now?"}, headers=agent)).status_code == 201
    gate = {"graduate_min_approvals": 0, "graduate_min_age_hours": 0}
    opened = await capi.http.put(
        f"/v1/admin/projects/{pid}/risk-dial", json={"account": gate}, headers=capi.auth(p["admin"])
    )
    assert opened.status_code == 200, opened.text
    await page.reload()
    await page.get_by_role("button", name="Approve: graduate renewals to auto_notify").click()
    await expect(page.get_by_role("status").first).to_contain_text("category graduated")
    await expect(page.locator("tbody tr").first).to_contain_text("auto_notify")
    seen = (await capi.http.get(proposals, headers=agent)).json()["proposals"]
    assert [(x["id"], x["status"]) for x in seen][1:] == [(first["id"], "rejected")]
    assert seen[0]["status"] == "approved"


async def test_admin_sees_blocks_and_suppressions_and_lifts_one(capi: Api, new_page: Any) -> None:
    """The Settings page lists each blocked or suppressed recipient with since when and by whom, and
    lifts a flag; the agent's mail to that address then goes through."""
    p = await _project(capi)
    page = await new_page()
    await sign_in(page, p["admin"], "/console/settings")
    await expect(page.get_by_text("No recipient is blocked or suppressed.")).to_be_visible()
    for address, verb in (("no@acme.com", "Block"), ("gone@acme.com", "Suppress")):
        await page.get_by_label("Address").fill(address)
        await page.get_by_role("button", name=verb, exact=True).click()
        await expect(page.get_by_role("status").first).to_contain_text("contact saved")
    listed = page.get_by_role("table", name="Blocked and suppressed recipients")
    blocked = listed.locator("tr", has_text="no@acme.com")
    await expect(blocked.locator("td").nth(1)).to_contain_text("since 20")
    await expect(blocked.locator("td").nth(2)).to_have_text("no")
    await expect(listed.locator("tr", has_text="gone@acme.com").locator("td").nth(2)).to_contain_text("since")
    await axe_clean(page, "settings-contacts")
    refused = await capi.http.post(
        "/v1/messages", json=draft(to=["no@acme.com"]), headers=capi.auth(p["agent"])
    )
    assert refused.json()["code"] == "recipient_blocked"

    await page.get_by_role("button", name="Unblock no@acme.com").click()
    await expect(page.get_by_role("status").first).to_contain_text("unblocked")
    await expect(listed.locator("tr", has_text="no@acme.com")).to_have_count(0)
    await expect(listed.locator("tr", has_text="gone@acme.com")).to_have_count(1)
    await submit(capi, p["agent"], to=["no@acme.com"])


async def test_a_walk_finds_console_pages_where_links_lead(capi: Api, new_page: Any, base_url: str) -> None:
    """What a walk through the console found: a mistyped console link answers a console page with the
    way back (not JSON), an empty filtered queue names its filter, one draft is "1 draft", and the
    browser's icon request is answered."""
    p = await _project(capi)
    category = await _category(capi, p["project_id"], "renewals")
    page = await new_page()
    await sign_in(page, p["human"])
    missing = await page.goto("/console/reveiws")
    assert missing is not None and missing.status == 404
    await expect(page.get_by_role("alert")).to_contain_text("No console page at /console/reveiws.")
    await page.get_by_role("link", name="Back to the queue").click()
    await expect(page).to_have_url(f"{base_url}/console/queue")
    await submit(capi, p["agent"], category_id=category)
    await page.goto("/console/queue")
    await expect(page.locator("caption").first).to_have_text("1 draft, oldest first")
    await page.goto(f"/console/queue?state=sent&category={category}")
    await expect(page.get_by_text("No drafts in state sent in renewals.")).to_be_visible()
    await axe_clean(page, "queue-filtered-empty")
    icon = await page.request.get("/console/static/favicon.svg")
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg")


async def test_a_refused_admin_action_keeps_the_navigation_and_the_way_back(capi: Api, new_page: Any) -> None:
    p = await _project(capi)
    await _category(capi, p["project_id"], "renewals")
    page = await new_page()
    await sign_in(page, p["admin"], "/console/categories")
    await page.get_by_role("button", name="Graduate renewals to auto_notify").click()
    await expect(page.get_by_role("alert")).to_contain_text("needs 20 clean approvals")
    nav = page.get_by_role("navigation", name="Console")
    await expect(nav.get_by_role("link", name="Settings")).to_be_visible()
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    # The refusal is shown on the Categories page itself, whose forms are right there again.
    await expect(page.get_by_role("heading", name="Categories")).to_be_visible()
    await expect(page.get_by_role("button", name="Graduate renewals to auto_notify")).to_be_visible()
    await axe_clean(page, "refused-graduate")


async def test_the_comment_form_waits_for_the_draft_to_be_opened(capi: Api, new_page: Any) -> None:
    """A human comments on a draft they have open (the machine takes no human chat on needs_review):
    before, the page says how, where it offered a form that was always refused."""
    p = await _project(capi)
    rid = await submit(capi, p["agent"])
    page = await new_page()
    await sign_in(page, p["human"], f"/console/reviews/{rid}")
    await expect(page.get_by_text("Open the draft for review to comment to its agent.")).to_be_visible()
    await expect(page.get_by_label("Comment to the agent")).to_have_count(0)
    await page.get_by_role("button", name="Open for review").click()
    await page.get_by_label("Comment to the agent").fill("Is Thursday firm?")
    await page.get_by_role("button", name="Send comment").click()
    await expect(page.locator("ol.thread")).to_contain_text("Is Thursday firm?")
    turns = (await capi.http.get(f"/v1/reviews/{rid}/turns", headers=capi.auth(p["agent"]))).json()["items"]
    assert [t["body"] for t in turns if t["turn_type"] == "human_comment"] == ["Is Thursday firm?"]
    await axe_clean(page, "review-comment")
