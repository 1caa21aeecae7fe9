"""What an operator reads off a running stack: Prometheus metrics per process, liveness and readiness."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from reviewloop.common.v1 import common_pb2
from reviewloop.review.v1 import review_pb2, review_pb2_grpc
from stack.launcher import Stack
from stack.topology import SERVICES

from tests.conftest import Api, Databases, _pg_server, draft, part_log, start_stack
from tests.e2e.helpers import events_until


def samples(text: str, name: str, **labels: str) -> list[float]:
    """The values of metric ``name`` whose labels include ``labels``."""
    found = []
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][\w:]*)\{(.*)\} (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2)))
        if all(have.get(k) == v for k, v in labels.items()):
            found.append(float(match.group(3)))
    return found


async def scrape(stack: Stack, name: str) -> str:
    url = f"http://{stack.env[f'REVIEWLOOP_{name.upper()}_METRICS_ADDR']}/metrics"
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


async def test_every_process_serves_metrics_for_what_it_did(api: Api, stack: Stack) -> None:
    agent = await api.agent()
    submitted = await api.http.post("/v1/messages", json=draft(), headers=agent)
    review_id = submitted.json()["review_id"]
    cancelled = await api.http.post(
        f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
    )
    assert cancelled.status_code == 200, cancelled.text
    missing = await api.http.get("/v1/reviews/rr_01M8XZ10T5D9FBBZ4TKKSSYRQZ", headers=agent)
    assert missing.status_code == 404
    await events_until(api, agent, 1)

    # The gateway's own port: requests by route, status and problem code (the stack is shared: other
    # tests' 404s count too).
    gateway = (await api.http.get("/metrics")).text
    not_found = samples(
        gateway,
        "reviewloop_http_server_duration_seconds_count",
        http_route="/v1/reviews/{review_id}",
        http_response_status_code="404",
        problem_code="not_found",
    )
    assert len(not_found) == 1 and not_found[0] >= 1
    assert samples(gateway, "reviewloop_http_server_duration_seconds_count", http_route="/v1/messages")

    review_state = await scrape(stack, "review_state")
    assert samples(
        review_state,
        "reviewloop_rpc_server_duration_seconds_count",
        rpc_method="/reviewloop.review.v1.ReviewStateService/GetReview",
        rpc_grpc_status="NOT_FOUND",
        problem_code="not_found",
    )
    assert samples(
        review_state, "reviewloop_review_transitions_total", from_state="needs_review", to_state="cancelled"
    ), "the cancel is counted as a transition"
    assert (
        len(samples(review_state, "reviewloop_delivery_parked")) == 1
    )  # shared stack: a gauge, not a count of ours
    assert samples(review_state, "db_client_connections_usage_connections"), "pool use"

    # The terminal nudge is un-acked: the project's backlog shows it, with its age.
    nudge = await scrape(stack, "nudge")
    project = [v for v in samples(nudge, "reviewloop_nudge_backlog") if v >= 1]
    assert project, nudge
    assert samples(nudge, "reviewloop_nudge_oldest_unacked_age_seconds")

    budget = await scrape(stack, "dispatch_budget")
    # A gauge of the store (the stack is shared: other tests' refusals count), read on every scrape.
    assert len(samples(budget, "reviewloop_budget_launch_refusals")) == 1


async def test_liveness_and_readiness(api: Api, stack: Stack) -> None:
    assert (await api.http.get("/livez")).status_code == 200
    ready = await api.http.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "not_ready": []}
    async with httpx.AsyncClient() as client:
        for name in SERVICES:
            base = f"http://{stack.env[f'REVIEWLOOP_{name.upper()}_METRICS_ADDR']}"
            assert (await client.get(f"{base}/livez")).status_code == 200, name
            assert (await client.get(f"{base}/readyz")).status_code == 200, name


async def test_a_stack_with_a_service_key_works_end_to_end_and_refuses_an_anonymous_caller(
    databases: Databases, backend: str, tmp_path: Path
) -> None:
    """Gateway calls, peer calls and outbox deliveries all carry the signed token; a process that only
    reaches review_state's port cannot act as a tenant."""
    if backend == "postgres":
        _pg_server()
    stack = await start_stack(databases, backend, tmp_path, {"REVIEWLOOP_SERVICE_AUTH_KEY": "s" * 48})
    api = Api(stack)
    try:
        agent = await api.agent()
        submitted = await api.http.post("/v1/messages", json=draft(), headers=agent)
        assert submitted.status_code == 202, submitted.text
        review_id = submitted.json()["review_id"]
        cancel = await api.http.post(
            f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
        )
        assert cancel.status_code == 200, cancel.text
        assert await events_until(api, agent, 1), "the relay's signed delivery reached nudge"
        async with grpc.aio.insecure_channel(stack.address("review_state")) as anonymous:
            stub = review_pb2_grpc.ReviewStateServiceStub(anonymous)  # type: ignore[attr-defined]
            principal = common_pb2.Principal(
                org_id="org_1", project_id="prj_1", actor_kind=common_pb2.ACTOR_KIND_ADMIN, actor_id="x"
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.GetReview(review_pb2.GetReviewRequest(principal=principal, review_id=review_id))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await api.http.aclose()
        stack.stop_all()


async def test_logs_are_json_lines_with_trace_and_review_ids_and_an_access_log(
    api: Api, stack: Stack
) -> None:
    agent = await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    read = await api.http.get(f"/v1/reviews/{review_id}", headers=agent)
    assert read.status_code == 200

    def access_lines() -> list[dict[str, Any]]:
        lines = [
            json.loads(line)
            for line in part_log(stack, "gateway").read_text().splitlines()
            if line.startswith("{")
        ]
        return [
            line
            for line in lines
            if line["logger"] == "reviewloop.access" and line.get("review_id") == review_id
        ]

    wanted = {("POST", "/v1/messages", 202), ("GET", "/v1/reviews/{review_id}", 200)}
    for _ in range(100):  # the access line is written once the response has gone out
        lines = access_lines()
        if {(line["method"], line["route"], line["status"]) for line in lines} >= wanted:
            break
        await asyncio.sleep(0.05)
    assert {(line["method"], line["route"], line["status"]) for line in lines} >= wanted, lines
    assert all(len(line["trace_id"]) == 32 and len(line["span_id"]) == 16 for line in lines)
    assert all(isinstance(line["duration_ms"], float) for line in lines)
