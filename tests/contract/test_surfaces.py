"""CONTRACT_VERSION is one value on every surface (spec 000, "Version"): the package, the OpenAPI
``info.version``, the ``X-Contract-Version`` header (successes, problems and /mcp alike), the MCP server
version, and the ``x-contract-version`` (trailing) metadata of every gRPC answer."""

from __future__ import annotations

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from reviewloop.contract import CONTRACT_MANIFEST, CONTRACT_VERSION, package_version_matches
from reviewloop.review.v1 import review_pb2, review_pb2_grpc
from stack.launcher import Stack
from stack.topology import GATEWAY, SERVICES

from tests.conftest import Api


async def test_every_surface_reads_the_same_contract_version(api: Api, stack: Stack) -> None:
    assert package_version_matches()

    document = await api.http.get("/openapi.yaml")
    assert yaml.safe_load(document.text)["info"]["version"] == CONTRACT_VERSION
    assert (await api.http.get("/v1/contract-manifest")).json() == CONTRACT_MANIFEST
    for response in (
        document,
        await api.http.get("/v1/reviews"),  # a 401 problem
        await api.http.get("/v1/nowhere"),  # a 404 problem
        await api.http.post("/mcp", json={}),  # refused before MCP sees it
    ):
        assert response.headers["x-contract-version"] == CONTRACT_VERSION, response.url

    url = f"http://{stack.address(GATEWAY)}/mcp"
    agent = await api.agent()
    async with (
        create_mcp_http_client(headers=agent) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        assert client.server_info is not None and client.server_info.version == CONTRACT_VERSION
        manifest = await client.call_tool("get_contract_manifest", {})
        assert manifest.structured_content == CONTRACT_MANIFEST

    for name in SERVICES:
        async with grpc.aio.insecure_channel(stack.address(name)) as channel:
            call = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            await call
            assert dict(await call.trailing_metadata())["x-contract-version"] == CONTRACT_VERSION, name
    # A refusal carries it too, beside its google.rpc details.
    async with grpc.aio.insecure_channel(stack.address("review_state")) as channel:
        refused = review_pb2_grpc.ReviewStateServiceStub(channel).GetReview(
            review_pb2.GetReviewRequest(review_id="rr_nope"), timeout=5
        )
        try:
            await refused
        except grpc.aio.AioRpcError as error:
            trailing = dict(error.trailing_metadata())
        assert trailing["x-contract-version"] == CONTRACT_VERSION
        assert "grpc-status-details-bin" in trailing
