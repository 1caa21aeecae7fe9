"""The queue's server-sent events resume after ``Last-Event-ID`` (SQLite and PostgreSQL)."""

from __future__ import annotations

import json

from tests.conftest import Api, draft


async def test_the_stream_resumes_after_the_last_event_id(api: Api) -> None:
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"], "agent"))["api_key"])
    human = (await api.key(project["project_id"], "human"))["api_key"]
    seen = (await api.http.post("/v1/messages", json=draft(subject="seen"), headers=agent)).json()
    missed = (await api.http.post("/v1/messages", json=draft(subject="missed"), headers=agent)).json()
    seen_at = (await api.http.get(f"/v1/reviews/{seen['review_id']}", headers=agent)).json()["updated_at"]
    missed_at = (await api.http.get(f"/v1/reviews/{missed['review_id']}", headers=agent)).json()["updated_at"]
    signed = await api.http.post("/console/sign-in", data={"key": human, "next": "/console/queue"})
    cookie = f"rl_console_read={signed.cookies['rl_console_read']}"
    api.http.cookies.clear()
    headers = {"cookie": cookie, "last-event-id": seen_at}
    async with api.http.stream("GET", "/console/events", headers=headers) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        event: dict[str, str] = {}
        async for line in stream.aiter_lines():
            if line.startswith(("id: ", "event: ", "data: ")):
                name, _, value = line.partition(": ")
                event[name] = value
            if "data" in event:
                break
    assert event["event"] == "review" and event["id"] == missed_at
    data = json.loads(event["data"])
    assert (data["id"], data["state"], data["pending"]) == (missed["review_id"], "needs_review", True)
