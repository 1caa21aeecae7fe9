"""Dead letters across real processes (issue 13): an event its receiver refuses for good is set aside with
the reason, visible to the project's admin (REST, client, metrics), and once the cause is fixed the admin
retries it and it is delivered once, or discards it and it never is."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from reviewloop.client import AsyncReviewloop, ReviewloopError
from reviewloop.config import metrics_variable
from stack.launcher import Stack
from stack.topology import GATEWAY

from tests.conftest import Api, Databases, draft, start_stack
from tests.e2e.helpers import events_until

NUDGE_INGEST = "/reviewloop.nudge.v1.NudgeService/Ingest"


@pytest.fixture
async def own_stack(databases: Databases, backend: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack of this test's own: the test replaces nudge with a broken release and back."""
    running = await start_stack(databases, backend, tmp_path)
    yield running
    running.stop_all()


@asynccontextmanager
async def broken_nudge(listen: str) -> AsyncIterator[None]:
    """A release of nudge that refuses every event for good (as a malformed body would be)."""

    async def refuse(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "event payload does not parse")
        return b""  # pragma: no cover - abort raises

    handler = grpc.method_handlers_generic_handler(
        "reviewloop.nudge.v1.NudgeService",
        {"Ingest": grpc.unary_unary_rpc_method_handler(refuse)},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    assert server.add_insecure_port(listen)
    await server.start()
    try:
        yield
    finally:
        await server.stop(0)


async def gauge_until(stack: Stack, value: float, timeout_s: float = 30.0) -> None:
    """Wait until review_state's metrics count ``value`` dead letters to nudge (a bound, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while (seen := await dead_letter_gauge(stack)) != value:
        assert time.monotonic() < deadline, seen
        await asyncio.sleep(0.1)


def spans(stack: Stack) -> list[dict[str, Any]]:
    """The spans exported so far (a line still being written is skipped)."""
    found = []
    for line in (stack.data_dir / "traces.jsonl").read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found


async def operator_cli(stack: Stack, *args: str) -> str:
    """``reviewloop outbox dead-letters ...`` as the deployment operator runs it, on the stack's stores."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stack", "outbox", "dead-letters", *args, env=stack.env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await process.communicate()
    assert process.returncode == 0, output
    return output.decode()


async def dead_letter_gauge(stack: Stack) -> float:
    address = stack.env[metrics_variable("review_state")]
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://{address}/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("reviewloop_outbox_dead_letters") and 'destination="nudge"' in line
    )


@pytest.mark.microservices_only("swaps nudge alone for a broken one, then back")
async def test_a_refused_event_is_a_dead_letter_the_admin_retries_once_fixed(own_stack: Stack) -> None:
    api = Api(own_stack)
    project = await api.project()
    project_id = project["project_id"]
    agent = api.auth((await api.key(project_id))["api_key"])
    ids = [
        (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
        for _ in range(2)
    ]

    own_stack.stop("nudge")
    async with broken_nudge(own_stack.address("nudge")):
        for review_id in ids:
            cancelled = await api.http.post(
                f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
            )
            assert cancelled.status_code == 200, cancelled.text
        # What an SRE sees first: the dead-letter gauge (and its alert).
        await gauge_until(own_stack, 2)
        # The deployment operator's CLI reads every store, across projects.
        listed = await operator_cli(own_stack)
        assert all(f"review_state -> nudge  nudge  {rid}  {project_id}" in listed for rid in ids), listed
    # Fixed: the real nudge is back. The admin reads what was set aside, and why.
    own_stack.start("nudge")
    await own_stack.wait_serving(["nudge"])
    listed = await api.http.get(f"/v1/admin/projects/{project_id}/dead-letters", headers=api.admin)
    assert listed.status_code == 200, listed.text
    letters = listed.json()["dead_letters"]
    assert {(x["source"], x["destination"], x["type"], x["aggregate_id"]) for x in letters} == {
        ("review_state", "nudge", "nudge", review_id) for review_id in ids
    }
    assert all("INVALID_ARGUMENT: event payload does not parse" in x["reason"] for x in letters), letters

    # Another tenant's admin sees no such project; another project's admin list is empty; an agent is refused.
    other = await api.project()
    stranger = api.auth((await api.key(other["project_id"], "admin"))["api_key"])
    refused = await api.http.get(f"/v1/admin/projects/{project_id}/dead-letters", headers=stranger)
    assert refused.status_code == 404 and refused.json()["code"] == "not_found", refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    mine = await api.http.get(f"/v1/admin/projects/{other['project_id']}/dead-letters", headers=stranger)
    assert mine.status_code == 200 and mine.json()["dead_letters"] == []
    retried_elsewhere = await api.http.post(
        f"/v1/admin/projects/{other['project_id']}/dead-letters/{letters[0]['event_id']}/retry",
        headers=stranger,
    )
    assert retried_elsewhere.status_code == 404, retried_elsewhere.text
    forbidden = await api.http.get(f"/v1/admin/projects/{project_id}/dead-letters", headers=agent)
    assert forbidden.status_code == 403 and forbidden.json()["code"] == "forbidden_scope"
    # Nothing reached the agent.
    assert not [e for e in await events_until(api, agent, 0) if e["reason"] == "cancelled"]

    # The admin retries one letter and discards the other.
    by_review = {x["aggregate_id"]: x for x in letters}
    admin_key = (await api.key(project_id, "admin"))["api_key"]
    async with AsyncReviewloop(f"http://{own_stack.address(GATEWAY)}", admin_key) as admin:
        assert len((await admin.list_dead_letters(project_id)).dead_letters) == 2
        retried = await admin.retry_dead_letter(project_id, by_review[ids[0]]["event_id"])
        assert retried.aggregate_id == ids[0]
        discarded = await admin.discard_dead_letter(
            project_id,
            by_review[ids[1]]["event_id"],
            reason="the review was cancelled by hand; no nudge owed",
        )
        assert discarded.aggregate_id == ids[1]
        assert (await admin.list_dead_letters(project_id)).dead_letters == []
        with pytest.raises(ReviewloopError) as again:
            await admin.retry_dead_letter(project_id, by_review[ids[0]]["event_id"])
        assert again.value.status == 404 and again.value.code == "not_found"
        with pytest.raises(ReviewloopError) as blank:
            await admin.discard_dead_letter(project_id, by_review[ids[1]]["event_id"], reason="")
        assert blank.value.code == "bad_request"

    # The retried event arrives once; the discarded one never does.
    events = await events_until(api, agent, 1)
    cancels = [(e["review_id"], e["reason"]) for e in events if e["reason"] == "cancelled"]
    assert cancels == [(ids[0], "cancelled")], events
    await gauge_until(own_stack, 0)
    # The retry's span at review_state names the review, so `reviewloop traces <review_id>` shows it
    # (spans are exported in batches every 200 ms: poll for it, bounded).
    deadline = time.monotonic() + 15
    while not any(
        span["name"].endswith("OutboxAdminService/RetryDeadLetter")
        and span["service"] == "review_state"
        and span["attributes"].get("reviewloop.review_id") == ids[0]
        for span in spans(own_stack)
    ):
        assert time.monotonic() < deadline, "no RetryDeadLetter span naming the review"
        await asyncio.sleep(0.2)
    assert (await operator_cli(own_stack, "--project", project_id)).strip() == "no dead letters"
    await api.http.aclose()
