"""Failure answers of the gateway itself, in-process against real gRPC servers: an unreachable backend is
503 with Retry-After, a deadline is 504, a backend crash is a 500 problem with no traceback, and a body
over the limit is 413 even when it streams without a Content-Length."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from gateway.asgi import create_app
from gateway.settings import GatewaySettings
from grpc_status import rpc_status
from reviewloop.errors import Code, DomainError, FieldViolation
from reviewloop.nudge.v1 import nudge_pb2, nudge_pb2_grpc
from reviewloop.review.v1 import review_pb2, review_pb2_grpc
from reviewloop.rpc_errors import MAX_VIOLATIONS, to_status
from stack.launcher import free_port
from stack.topology import SERVICES

from tests.gateway.inprocess import lifespan

ADMIN = "rladm_errors_test"
TIMEOUT_S = 0.3


class SlowOrBrokenNudge(nudge_pb2_grpc.NudgeServiceServicer):
    async def ListEvents(self, request: Any, context: Any) -> nudge_pb2.ListEventsResponse:
        await asyncio.sleep(TIMEOUT_S * 5)
        return nudge_pb2.ListEventsResponse()

    async def Ack(self, request: Any, context: Any) -> nudge_pb2.AckResponse:
        raise RuntimeError("secret internals that must never reach a caller")


class OverflowingReview(review_pb2_grpc.ReviewStateServiceServicer):
    def __init__(self, violations: int) -> None:
        self.violations = violations

    async def GetReview(self, request: Any, context: Any) -> review_pb2.Review:
        # So many bad fields that the packed status outgrows gRPC's trailer limit.
        error = DomainError(
            Code.BAD_REQUEST,
            "bad " * 100,
            violations=[
                FieldViolation(f"/bcc/{i}", "not an email address " * 5) for i in range(self.violations)
            ],
        )
        await context.abort_with_status(rpc_status.to_status(to_status(error)))
        raise AssertionError("unreachable")


Start = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """Starts an in-process gateway whose backends are the given servicers; every other backend's
    address has nothing listening."""
    async with AsyncExitStack() as stack:

        async def start_(**servicers: Any) -> httpx.AsyncClient:
            peers = {name: f"127.0.0.1:{free_port()}" for name in SERVICES}
            for name, servicer in servicers.items():
                server = grpc.aio.server()
                ADD[name](servicer, server)
                peers[name] = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
                await server.start()
                stack.push_async_callback(server.stop, None)
            settings = GatewaySettings(
                db_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
                host="127.0.0.1",
                port=0,
                data_dir=tmp_path,
                peers=peers,
                admin_token=ADMIN,
                max_body_bytes=64 * 1024,
                backend_timeout_s=TIMEOUT_S,
                otlp_endpoint=None,
            )
            app = create_app(settings)
            await stack.enter_async_context(lifespan(app))
            transport = httpx.ASGITransport(app=app)
            return await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://gateway")
            )

        yield start_


ADD: dict[str, Callable[[Any, grpc.aio.Server], None]] = {
    "nudge": nudge_pb2_grpc.add_NudgeServiceServicer_to_server,
    "review_state": review_pb2_grpc.add_ReviewStateServiceServicer_to_server,
}


async def agent_key(client: httpx.AsyncClient) -> dict[str, str]:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    project = (await client.post("/v1/admin/projects", json={"name": "p"}, headers=admin)).json()
    key = await client.post(
        "/v1/admin/api-keys", json={"project_id": project["project_id"], "actor_kind": "agent"}, headers=admin
    )
    return {"Authorization": f"Bearer {key.json()['api_key']}"}


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["x-contract-version"]
    problem: dict[str, Any] = response.json()
    assert (problem["status"], problem["code"]) == (status, code)
    return problem


async def test_an_unreachable_backend_is_503_with_retry_after(start: Start) -> None:
    gateway = await start()
    agent = await agent_key(gateway)
    response = await gateway.get("/v1/reviews", headers=agent)
    assert_problem(response, 503, "unavailable")
    assert int(response.headers["retry-after"]) >= 1


async def test_a_backend_past_its_deadline_is_504(start: Start) -> None:
    gateway = await start(nudge=SlowOrBrokenNudge())  # type: ignore[abstract]
    agent = await agent_key(gateway)
    # The spec has no timeout code: a deadline is unavailable (retry shortly), keeping its 504.
    response = await gateway.get("/v1/review-events", headers=agent)
    assert_problem(response, 504, "unavailable")
    assert int(response.headers["retry-after"]) >= 1


async def test_a_backend_crash_is_a_500_problem_without_a_traceback(start: Start) -> None:
    gateway = await start(nudge=SlowOrBrokenNudge())  # type: ignore[abstract]
    agent = await agent_key(gateway)
    response = await gateway.post(
        "/v1/review-events/ack", json={"acks": [{"review_id": "rr_x", "seq": 1}]}, headers=agent
    )
    problem = assert_problem(response, 500, "internal")
    assert "secret internals" not in response.text and "Traceback" not in response.text
    assert problem["detail"] == "The server failed to handle the request."


@pytest.mark.parametrize("violations", [110, 400], ids=["over-the-soft-limit", "over-the-hard-limit"])
async def test_an_error_too_big_for_grpc_metadata_is_still_a_problem(start: Start, violations: int) -> None:
    gateway = await start(review_state=OverflowingReview(violations))  # type: ignore[abstract]
    agent = await agent_key(gateway)
    problem = assert_problem(await gateway.get("/v1/reviews/rr_x", headers=agent), 422, "bad_request")
    # The service caps what it packs (rpc_errors.MAX_VIOLATIONS); the gateway copes with what still overflows.
    assert "/openapi.yaml" in problem["detail"] or len(problem["errors"]) == min(violations, MAX_VIOLATIONS)


async def test_a_streamed_body_over_the_limit_is_413(start: Start) -> None:
    gateway = await start()
    agent = await agent_key(gateway)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"to": ["a@b.co"], "subject": "s", "body_text": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}'

    response = await gateway.post(
        "/v1/messages", content=chunks(), headers={**agent, "content-type": "application/json"}
    )
    # The spec has no payload_too_large code: a bad_request naming the whole body, keeping its 413.
    problem = assert_problem(response, 413, "bad_request")
    assert problem["errors"][0]["field"] == ""


async def test_a_console_create_is_replayed_on_its_idempotency_key(start: Start) -> None:
    gateway = await start()
    admin = {"Authorization": f"Bearer {ADMIN}", "Idempotency-Key": "create-acme"}
    first = await gateway.post("/v1/admin/projects", json={"name": "acme"}, headers=admin)
    again = await gateway.post("/v1/admin/projects", json={"name": "acme"}, headers=admin)
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    other = await gateway.post("/v1/admin/projects", json={"name": "globex"}, headers=admin)
    assert_problem(other, 409, "idempotency_conflict")


async def test_a_gateway_owned_mutation_runs_once_per_idempotency_key(start: Start) -> None:
    gateway = await start()
    admin = {"Authorization": f"Bearer {ADMIN}"}
    project = (await gateway.post("/v1/admin/projects", json={"name": "p"}, headers=admin)).json()
    body = {"project_id": project["project_id"], "actor_kind": "agent"}
    keyed = {**admin, "Idempotency-Key": "issue-1"}
    first = await gateway.post("/v1/admin/api-keys", json=body, headers=keyed)
    again = await gateway.post("/v1/admin/api-keys", json=body, headers=keyed)
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    # The replay names the same key; its secret was shown once and is not kept.
    assert {**again.json(), "api_key": first.json()["api_key"], "note": None} == {
        **first.json(),
        "note": None,
    }
    # Without a key, each call is its own mutation.
    other = await gateway.post("/v1/admin/api-keys", json=body, headers=admin)
    assert other.json()["key_id"] != first.json()["key_id"]


async def test_a_failed_mutation_does_not_burn_its_idempotency_key(start: Start) -> None:
    gateway = await start()
    admin = {"Authorization": f"Bearer {ADMIN}", "Idempotency-Key": "create-under-org"}
    missing_org = await gateway.post(
        "/v1/admin/projects", json={"name": "p", "org_id": "org_x"}, headers=admin
    )
    assert_problem(missing_org, 404, "not_found")
    retried = await gateway.post("/v1/admin/projects", json={"name": "p", "org_id": "org_x"}, headers=admin)
    assert_problem(retried, 404, "not_found")  # ran again, not replayed


async def test_a_revoked_key_gets_no_replay(start: Start) -> None:
    gateway = await start()
    admin = {"Authorization": f"Bearer {ADMIN}"}
    project = (await gateway.post("/v1/admin/projects", json={"name": "p"}, headers=admin)).json()
    issued = await gateway.post(
        "/v1/admin/api-keys", json={"project_id": project["project_id"], "actor_kind": "admin"}, headers=admin
    )
    project_admin = {"Authorization": f"Bearer {issued.json()['api_key']}", "Idempotency-Key": "p-1"}
    made = await gateway.post("/v1/admin/projects", json={"name": "q"}, headers=project_admin)
    assert made.status_code == 201
    await gateway.post(f"/v1/admin/api-keys/{issued.json()['key_id']}/revoke", headers=admin)
    assert_problem(
        await gateway.post("/v1/admin/projects", json={"name": "q"}, headers=project_admin),
        401,
        "unauthorized",
    )


async def test_a_malformed_idempotency_key_is_a_422_naming_the_header(start: Start) -> None:
    gateway = await start()
    headers = {"Authorization": f"Bearer {ADMIN}", "Idempotency-Key": "x" * 300}
    problem = assert_problem(
        await gateway.post("/v1/admin/projects", json={"name": "p"}, headers=headers), 422, "bad_request"
    )
    assert problem["errors"][0]["field"] == "/Idempotency-Key"
