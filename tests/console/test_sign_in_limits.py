"""Issue 38: console sign-in is rate limited per key prefix and per address (429 with Retry-After), and a
sign-in POST from another site is refused before it can set a session cookie (it set both before)."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.async_api import expect

from tests.conftest import Api
from tests.console.test_console import _project, axe_clean, sign_in


async def test_sign_in_attempts_are_limited_per_key_prefix_with_retry_after(
    capi: Api, new_page: Any, base_url: str
) -> None:
    page = await new_page()
    await page.goto("/console/sign-in")
    prefix = "rlk_Zq9Xw2Lm"
    for n in range(10):  # the window's allowance for one key prefix: each refused as unknown
        response = await page.request.post(
            "/console/sign-in", form={"key": f"{prefix}-guess-{n}", "next": "/console/queue"}, max_redirects=0
        )
        assert response.status == 401, (n, response.status)
    await page.get_by_label("Human or admin API key").fill(f"{prefix}-guess-10")
    async with page.expect_response("**/console/sign-in") as answer:
        await page.get_by_role("button", name="Sign in").click()
    refused = await answer.value
    assert refused.status == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    await expect(page.get_by_role("alert")).to_contain_text(
        "Too many sign-in attempts from this key; try again in"
    )
    await axe_clean(page, "sign-in-rate-limited")

    # Per address: another address (127.0.0.2, so this module's browser keeps signing in) is cut off
    # after its allowance whatever keys it tries; a right key does not get past the window either.
    p = await _project(capi)
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=base_url, transport=transport) as other:
        statuses = [
            (await other.post("/console/sign-in", data={"key": f"rlk_addr{n:04d}xyz"})).status_code
            for n in range(30)
        ]
        assert set(statuses) == {401}, statuses
        blocked = await other.post("/console/sign-in", data={"key": p["human"]})
        assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) >= 1
        assert "Too many sign-in attempts from this address" in blocked.text
        assert "set-cookie" not in blocked.headers


async def test_a_cross_site_sign_in_post_is_refused_and_sets_no_cookie(
    capi: Api, new_page: Any, base_url: str
) -> None:
    p = await _project(capi)
    page = await new_page()
    # Another site's page (localhost is not 127.0.0.1's site) with a form that posts a real key.
    evil = f"""<!doctype html><html lang="en"><title>win a prize</title><body>
<form method="post" action="{base_url}/console/sign-in"><input name="key" value="{p["human"]}">
<input name="next" value="/console/queue"></form><script>document.forms[0].submit()</script></body></html>"""
    await page.route(
        "http://localhost:9/prize",
        lambda route: route.fulfill(status=200, content_type="text/html", body=evil),
    )
    async with page.expect_response("**/console/sign-in") as answer:
        await page.goto("http://localhost:9/prize")
    refused = await answer.value
    assert refused.status == 403
    assert (await refused.header_value("set-cookie")) is None
    await expect(page.get_by_role("alert")).to_contain_text(
        "must be sent from this console's own sign-in page"
    )
    assert [c["name"] for c in await page.context.cookies(f"{base_url}/console/queue")] == []
    await axe_clean(page, "sign-in-cross-site-refused")
    # The console's own form still signs in.
    await sign_in(page, p["human"])
    await expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    assert {"rl_console", "rl_console_read"} <= {
        c["name"] for c in await page.context.cookies(f"{base_url}/console/queue")
    }
