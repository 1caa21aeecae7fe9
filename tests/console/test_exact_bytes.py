"""Issue 38, "exact bytes", in headless Chromium against a whole stack on a real SMTP relay (aiosmtpd):
what a human approves is what is delivered. An edit covers the HTML part too and is previewed, every part
diffed; the page shows the approval digest of the exact MIME message and the approve names it; the
server refuses a decision whose message would hash otherwise; the message the relay received hashes to
what was approved (text-only, HTML and attachment-carrying drafts, edited and not); the HTML preview
renders as a mail client would, with hidden content in its own view and the raw MIME one click away;
the warning panel parses the HTML and its styles and reads domains by their confusables skeleton."""

from __future__ import annotations

import uuid
from typing import Any

from playwright.async_api import Page, expect

from tests.conftest import Api
from tests.console.conftest import OUTPUT
from tests.console.test_console import _project, axe_clean, sign_in, submit
from tests.e2e.test_delivery_smtp import Relay
from tests.exact_bytes import (
    EDITED_BODY,
    HIDDEN_LINE,
    HTML,
    each_kind_delivers_what_was_approved,
    html_of,
    received_by,
)


async def open_for_review(page: Page, review_id: str) -> None:
    await page.goto(f"/console/reviews/{review_id}")
    await page.get_by_role("button", name="Open for review").click()
    await expect(page.locator("#live")).to_have_text("Opened for review; you have it now.")


async def shown_digest(page: Page) -> str:
    digest = (await page.locator("#message-sha256").text_content() or "").strip()
    assert len(digest) == 64, digest
    return digest


async def test_delivered_message_hashes_to_what_was_approved(capi: Api, new_page: Any, relay: Relay) -> None:
    """Text-only, HTML and attachment-carrying drafts, approved as they are and edited: each message the
    SMTP relay received hashes to the digest the page showed and the approval named."""
    p = await _project(capi)
    page = await new_page()
    await sign_in(page, p["human"])

    async def approve(rid: str, edited: bool) -> str:
        await open_for_review(page, rid)
        if not edited:
            approved = await shown_digest(page)
            await page.get_by_role("button", name="Approve").click()
            return approved
        await page.get_by_text("Edit inline").click()
        await page.get_by_label("Body").fill(EDITED_BODY)
        await page.get_by_role("button", name="Preview edit").click()
        approved = await shown_digest(page)
        await page.get_by_role("button", name="Save edit and approve").click()
        return approved

    await each_kind_delivers_what_was_approved(capi, p["agent"], relay, approve)


async def test_an_edit_covers_the_html_part_and_the_diff_shows_every_part(
    capi: Api, new_page: Any, relay: Relay
) -> None:
    p = await _project(capi)
    recipient = f"cfo-{uuid.uuid4().hex[:8]}@acme.com"
    rid = await submit(capi, p["agent"], to=[recipient], body_text="Please call me.", body_html=HTML)
    page = await new_page()
    await sign_in(page, p["human"])
    await open_for_review(page, rid)
    # The parts disagree before anyone edits: flagged before approval.
    panel = page.get_by_role("region", name="Warnings: what the rendered mail hides")
    await expect(panel).to_contain_text("the text and HTML parts say different things")
    await page.get_by_text("Edit inline").click()
    await expect(page.get_by_role("group", name="HTML part (what most mail clients show)")).to_be_visible()
    await expect(page.get_by_label("Regenerate the HTML part from the text above")).to_be_checked()
    await page.get_by_label("Body").fill("Could we talk on Thursday at 2pm?")
    await page.get_by_role("button", name="Preview edit").click()
    diff = page.get_by_role("region", name="Every part, before (-) and after your edit (+)")
    await expect(diff).to_contain_text("The HTML part was regenerated from your text")
    await expect(diff).to_contain_text("@@ body_html")
    await expect(diff).to_contain_text(f"- {HTML}"[:40])
    await expect(diff).to_contain_text("+ <p>Could we talk on Thursday at 2pm?</p>")
    edited_warnings = page.locator("section").filter(has=page.locator("#warn"))
    await expect(edited_warnings).not_to_contain_text("say different things")  # one text, two parts
    await expect(edited_warnings).not_to_contain_text("hides text")
    await expect(
        page.frame_locator("iframe[name=edited-html]").get_by_text("Could we talk on Thursday at 2pm?")
    ).to_be_visible()
    await axe_clean(page, "edit-preview")
    await page.get_by_role("button", name="Save edit and approve").click()
    delivered = html_of(await received_by(relay, recipient))
    assert (
        "Thursday at 2pm" in delivered and HIDDEN_LINE not in delivered and "pay by Friday" not in delivered
    )

    # The reviewer may edit the HTML itself instead: it is sanitized (no script, no hiding style).
    second = f"vp-{uuid.uuid4().hex[:8]}@acme.com"
    rid = await submit(capi, p["agent"], to=[second], body_text="Hi", body_html="<p>Hi</p>")
    await open_for_review(page, rid)
    await page.get_by_text("Edit inline").click()
    await page.get_by_label("Edit the HTML part").check()
    await page.get_by_label("HTML part", exact=True).fill(
        '<p style="color:#036">Hi there</p><script>alert(1)</script><p style="display:none">psst</p>'
    )
    await page.get_by_label("Body").fill("Hi there")
    await page.get_by_role("button", name="Preview edit").click()
    await page.locator("#raw-mime summary").click()
    raw_view = page.locator("#raw-mime pre")
    await expect(raw_view).to_contain_text('<p style="color:#036">Hi there</p>')
    await expect(raw_view).not_to_contain_text("<script>")
    await expect(raw_view).not_to_contain_text("display:none")
    await page.get_by_role("button", name="Save edit and approve").click()
    delivered = html_of(await received_by(relay, second))
    assert "Hi there" in delivered and "<script>" not in delivered and "display:none" not in delivered


async def test_an_approval_naming_another_message_is_refused(capi: Api, new_page: Any) -> None:
    """The approve names the digest the page showed; the server refuses (stale, with what changed) when
    the message it would deliver hashes otherwise, and nothing is decided."""
    p = await _project(capi)
    rid = await submit(capi, p["agent"], body_text="Please pay by Friday.", body_html=HTML)
    page = await new_page()
    await sign_in(page, p["human"])
    await open_for_review(page, rid)
    shown = await shown_digest(page)
    await page.evaluate("document.querySelector('input[name=message_sha256]').value = '0'.repeat(64)")
    await page.get_by_role("button", name="Approve").click()
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text("The message this approve would deliver is not the one you saw")
    await expect(alert).to_contain_text(f"it is now {shown[:16]}")
    # An edit whose posted text is not the text previewed is refused the same way.
    await page.get_by_text("Edit inline").click()
    await page.get_by_label("Body").fill("Could we talk on Thursday?")
    await page.get_by_role("button", name="Preview edit").click()
    await page.evaluate("document.querySelector('input[name=body]').value = 'Wire it to the new account.'")
    await page.get_by_role("button", name="Save edit and approve").click()
    await expect(page.get_by_role("alert")).to_contain_text("The message this edit would deliver is not")
    await axe_clean(page, "review-digest-refused")
    state = (await capi.http.get(f"/v1/reviews/{rid}", headers=capi.auth(p["agent"]))).json()["state"]
    assert state == "in_review"


async def test_html_preview_renders_as_a_mail_client_with_hidden_content_beside_it(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    html = (
        HTML + '<div style="color:#ffffff">white on white</div>'
        '<p style="font-size:1px">one pixel</p><span style="color:transparent">transparent</span>'
        '<div style="position:absolute; left:-9999px">off screen</div><p>Nothing is hidden here.</p>'
    )
    rid = await submit(
        capi, p["agent"], body_text="Please pay by Friday. Nothing is hidden here.", body_html=html
    )
    page = await new_page()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    await sign_in(page, p["human"], f"/console/reviews/{rid}")
    frame = page.frame_locator("iframe.html-part")
    styled = frame.get_by_text("Please pay by Friday.")
    await expect(styled).to_be_visible()
    await expect(styled).to_have_css("color", "rgb(204, 0, 0)")  # the <style> block applies
    await expect(styled).to_have_css("font-weight", "700")
    await expect(frame.get_by_text(HIDDEN_LINE)).to_be_hidden()  # display:none hides, as in a client
    hidden = page.get_by_role("region", name="Hidden content (sent, but not shown by mail clients)")
    for text in (HIDDEN_LINE, "white on white", "one pixel", "transparent", "off screen"):
        await expect(hidden).to_contain_text(text)
    await expect(hidden).not_to_contain_text("Nothing is hidden here.")
    raw = page.locator("#raw-mime pre")
    await expect(raw).to_be_hidden()
    await page.get_by_text("Raw MIME (the exact bytes)").click()  # one click away
    await expect(raw).to_contain_text("Content-Type: multipart/alternative")
    await expect(raw).to_contain_text("Content-Type: text/html")
    assert violations == [], violations
    await axe_clean(page, "review-html-preview")
    # Under tests/console/output/ (docs/ holds copies, refreshed by hand): a run leaves the checkout clean.
    OUTPUT.mkdir(exist_ok=True)
    # A viewport as tall as the page: a full-page capture leaves the sandboxed frame blank.
    height = await page.evaluate("document.documentElement.scrollHeight")
    await page.set_viewport_size({"width": 1280, "height": int(height)})
    await page.screenshot(path=str(OUTPUT / "console-review-exact-bytes.png"))
    await page.locator(".html-views").screenshot(path=str(OUTPUT / "console-hidden-content.png"))


async def test_warning_panel_reads_domains_by_skeleton_and_html_by_its_styles(
    capi: Api, new_page: Any
) -> None:
    p = await _project(capi)
    rid = await submit(
        capi,
        p["agent"],
        to=["it@rnicrosoft.com", "billing@paypa1.com", "ceo@xn--pple-43d.com"],
        body_text="Nothing is hidden here.",
        body_html='<p>Nothing is hidden here.</p><p style="color:#fff;background:#fff">white on white</p>',
    )
    page = await new_page()
    await sign_in(page, p["human"], f"/console/reviews/{rid}")
    panel = page.get_by_role("region", name="Warnings: what the rendered mail hides")
    await expect(panel).to_contain_text("recipient domain rnicrosoft.com looks like microsoft.com")
    await expect(panel).to_contain_text("recipient domain paypa1.com looks like paypal.com")
    await expect(panel).to_contain_text(
        "recipient domain xn--pple-43d.com is an internationalized name: it shows as \u0430pple.com "
        "(\u0430 U+0430 CYRILLIC SMALL LETTER A)"
    )
    await expect(panel).to_contain_text("\u0430pple.com mixes scripts in \u0430pple (CYRILLIC, LATIN)")
    await expect(panel).to_contain_text("recipient domain \u0430pple.com looks like apple.com")
    await expect(panel).to_contain_text(
        'HTML part hides text (text the colour of its background): "white on white"'
    )
    await expect(panel).not_to_contain_text('"Nothing is hidden here."')  # visible: not hidden text
    await expect(panel).not_to_contain_text("say different things")
    await axe_clean(page, "review-warnings-confusables")
