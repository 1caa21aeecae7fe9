"""Two replicas of review_state and two of nudge on one PostgreSQL, each pair behind its own gateway,
under concurrent load: no nudge is lost or doubled and no approved message is delivered twice.

The replicas share their stores; their outbox relays share the work (``FOR UPDATE SKIP LOCKED``), so an
event written through one replica may be delivered by the other, to either nudge."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from stack.launcher import Stack, free_port

from tests.conftest import Api, Databases, _pg_server, draft, start_stack

REPLICATED = ("review_state", "nudge", "gateway")
REVIEWS = 16


async def test_two_replicas_each_of_review_state_and_nudge_lose_and_double_nothing(
    databases: Databases, tmp_path: Path
) -> None:
    _pg_server()
    first = await start_stack(databases, "postgres", tmp_path / "a")
    env = dict(first.env, REVIEWLOOP_DATA_DIR=str(tmp_path / "b"))
    for name in REPLICATED:
        env[f"REVIEWLOOP_{name.upper()}_ADDR"] = f"127.0.0.1:{free_port()}"
        env[f"REVIEWLOOP_{name.upper()}_METRICS_ADDR"] = f"127.0.0.1:{free_port()}"
    second = Stack(env)
    apis = [Api(first), Api(second)]
    try:
        for name in REPLICATED:
            second.start(name)
        await second.wait_serving(REPLICATED)
        project = (await apis[0].project())["project_id"]
        agent = apis[0].auth((await apis[0].key(project))["api_key"])
        human = apis[0].auth((await apis[0].key(project, "human"))["api_key"])

        async def one(i: int) -> tuple[str, str, str]:
            """Submit through one gateway, then approve or cancel through the other."""
            here, there = apis[i % 2], apis[(i + 1) % 2]
            marker = uuid.uuid4().hex
            submitted = await here.http.post(
                "/v1/messages", json=draft(subject=f"load {marker}"), headers=agent
            )
            assert submitted.status_code == 202, submitted.text
            review_id = submitted.json()["review_id"]
            if i % 2:
                done = await there.http.post(
                    f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
                )
                assert done.status_code == 200, done.text
                return review_id, marker, "cancelled"
            opened = await there.http.post(
                f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
            )
            assert opened.status_code == 200, opened.text
            approved = await here.http.post(
                f"/v1/reviews/{review_id}/decision",
                json={"action": "approve", "revision": 1, "version": opened.json()["version"]},
                headers=human,
            )
            assert approved.status_code == 200, approved.text
            return review_id, marker, "sent"

        outcomes = await asyncio.gather(*(one(i) for i in range(REVIEWS)))

        async def events() -> list[dict[str, Any]]:
            response = await apis[1].http.get("/v1/review-events", params={"limit": 200}, headers=agent)
            assert response.status_code == 200, response.text
            return list(response.json()["events"])

        deadline = time.monotonic() + 30
        while True:
            found = await events()
            ended = {e["review_id"] for e in found if e["reason"] in ("sent", "cancelled")}
            if len(ended) == REVIEWS or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        for review_id, marker, ending in outcomes:
            log = [(e["reason"], e["seq"]) for e in found if e.get("review_id") == review_id]
            seqs = [seq for _, seq in log]
            assert seqs == list(range(1, len(seqs) + 1)), (review_id, log)  # none lost, none doubled
            assert [reason for reason, _ in log].count(ending) == 1, (review_id, log)
            emls = [
                path
                for stack in (first, second)
                for path in (stack.data_dir / "outbox").glob("*.eml")
                if marker.encode() in path.read_bytes()
            ]
            assert len(emls) == (1 if ending == "sent" else 0), (review_id, emls)
    finally:
        for api in apis:
            await api.http.aclose()
        second.stop_all()
        first.stop_all()
