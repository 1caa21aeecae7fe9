"""Console sessions over plain HTTP, on SQLite and PostgreSQL: who may sign in, the cookies' flags, what
each cookie may do, CSRF and sign-out (the browser scenarios are in test_console.py)."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
from gateway import store
from reviewloop.storage import Database, make_engine
from reviewloop.storage.schema import utcnow
from sqlalchemy import select, update

from tests.conftest import Api, draft


async def _sign_in(api: Api, key: str) -> httpx.Response:
    return await api.http.post(
        "/console/sign-in", data={"key": key, "next": "/console/queue"}, follow_redirects=False
    )


def _csrf(page: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, page
    return match.group(1)


async def test_only_human_and_admin_keys_sign_in_and_cookies_hold_no_key(api: Api) -> None:
    project = await api.project()
    agent = (await api.key(project["project_id"], "agent"))["api_key"]
    human = (await api.key(project["project_id"], "human"))["api_key"]
    refused = await _sign_in(api, agent)
    assert refused.status_code == 403 and "cannot sign in" in refused.text
    assert not refused.headers.get_list("set-cookie")
    assert (await _sign_in(api, "rlk_unknown")).status_code == 401
    assert (await _sign_in(api, api.admin["Authorization"].split()[1])).status_code == 401

    signed = await _sign_in(api, human)
    assert signed.status_code == 303 and signed.headers["location"] == "/console/queue"
    cookies = {c.split("=", 1)[0]: c.lower() for c in signed.headers.get_list("set-cookie")}
    assert "httponly" in cookies["rl_console"] and "samesite=strict" in cookies["rl_console"]
    assert "httponly" in cookies["rl_console_read"] and "samesite=lax" in cookies["rl_console_read"]
    assert all(human.lower() not in c for c in cookies.values())  # the key never reaches the browser


async def test_the_read_cookie_reads_only_and_writes_need_the_session_csrf(api: Api) -> None:
    project = await api.project()
    human = (await api.key(project["project_id"], "human"))["api_key"]
    signed = await _sign_in(api, human)
    write, read = signed.cookies["rl_console"], signed.cookies["rl_console_read"]
    api.http.cookies.clear()

    async def as_(cookies: dict[str, str], method: str, path: str, **kw: object) -> httpx.Response:
        request = api.http.build_request(method, path, **kw)  # type: ignore[arg-type]
        request.headers["cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        return await api.http.send(request, follow_redirects=False)

    queue = await as_({"rl_console_read": read}, "GET", "/console/queue")
    assert queue.status_code == 200 and "Review queue" in queue.text
    csrf = _csrf(queue.text)
    # A cross-site POST carries only the Lax cookie: it is sent to sign in, and nothing changes.
    lax_only = await as_({"rl_console_read": read}, "POST", "/console/sign-out", data={"csrf": csrf})
    assert lax_only.status_code == 303 and lax_only.headers["location"].startswith("/console/sign-in")
    forged = await as_({"rl_console": write}, "POST", "/console/sign-out", data={"csrf": "0" * 64})
    assert forged.status_code == 403
    assert (await as_({"rl_console": write}, "GET", "/console/queue")).status_code == 200
    out = await as_({"rl_console": write}, "POST", "/console/sign-out", data={"csrf": csrf})
    assert out.status_code == 303
    for cookie in ({"rl_console": write}, {"rl_console_read": read}):
        after = await as_(cookie, "GET", "/console/queue")
        assert after.status_code == 303 and after.headers["location"].startswith("/console/sign-in")


async def test_a_revoked_key_ends_its_sessions(api: Api) -> None:
    project = await api.project()
    issued = await api.key(project["project_id"], "human")
    signed = await _sign_in(api, issued["api_key"])
    api.http.cookies.clear()
    cookie = {"cookie": f"rl_console_read={signed.cookies['rl_console_read']}"}
    assert (await api.http.get("/console/queue", headers=cookie)).status_code == 200
    revoked = await api.http.post(f"/v1/admin/api-keys/{issued['key_id']}/revoke", headers=api.admin)
    assert revoked.status_code == 200, revoked.text
    after = await api.http.get("/console/queue", headers=cookie)
    assert after.status_code == 303


async def test_sessions_expire_and_only_hashes_are_stored(api: Api) -> None:
    project = await api.project()
    human = (await api.key(project["project_id"], "human"))["api_key"]
    signed = await _sign_in(api, human)
    api.http.cookies.clear()
    read = signed.cookies["rl_console_read"]
    db = Database(make_engine(api.stack.env["REVIEWLOOP_GATEWAY_DB"]))
    try:
        async with db.engine.connect() as conn:
            rows = (await conn.execute(select(store.console_sessions))).all()
        stored = " ".join(str(v) for row in rows for v in row)
        assert read not in stored and signed.cookies["rl_console"] not in stored and human not in stored
        assert store.hash_key(read) in stored
        async with db.transaction() as uow:
            await uow.conn.execute(
                update(store.console_sessions)
                .where(store.console_sessions.c.read_hash == store.hash_key(read))
                .values(expires_at=utcnow() - timedelta(seconds=1))
            )
    finally:
        await db.dispose()
    expired = await api.http.get("/console/queue", headers={"cookie": f"rl_console_read={read}"})
    assert expired.status_code == 303 and expired.headers["location"].startswith("/console/sign-in")
    # The next sign-in sweeps expired sessions away.
    await _sign_in(api, human)
    api.http.cookies.clear()
    db = Database(make_engine(api.stack.env["REVIEWLOOP_GATEWAY_DB"]))
    try:
        async with db.engine.connect() as conn:
            left = (await conn.execute(select(store.console_sessions.c.expires_at))).scalars().all()
    finally:
        await db.dispose()
    assert left and all(expires > utcnow() for expires in left)


async def test_a_double_submitted_form_acts_once(api: Api) -> None:
    """Each rendered form carries its own idempotency key: the same form posted twice is one open, and
    the second post answers like the first instead of a stale refusal."""
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"], "agent"))["api_key"])
    human = (await api.key(project["project_id"], "human"))["api_key"]
    submitted = await api.http.post("/v1/messages", json=draft(), headers=agent)
    review_id = submitted.json()["review_id"]
    await _sign_in(api, human)  # the client keeps the session's cookies from here on
    page = (await api.http.get(f"/console/reviews/{review_id}")).text
    form = re.search(r'action="/console/reviews/[^"]+/open"(.*?)</form>', page, re.S)
    assert form, page
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.group(1)))
    for _ in range(2):
        posted = await api.http.post(
            f"/console/reviews/{review_id}/open", data=fields, follow_redirects=False
        )
        assert posted.status_code == 303, posted.text
        assert posted.headers["location"] == f"/console/reviews/{review_id}?done=open"
    after = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert (after["state"], after["version"]) == ("in_review", 2)
    api.http.cookies.clear()
