"""Stubs for every backend service, over the shared traced channels."""

from __future__ import annotations

import asyncio

import grpc
from fastapi import Request
from grpc_health.v1 import health_pb2, health_pb2_grpc
from reviewloop.budget.v1 import budget_pb2_grpc
from reviewloop.diff.v1 import diff_pb2_grpc
from reviewloop.nudge.v1 import nudge_pb2_grpc
from reviewloop.review.v1 import review_pb2_grpc
from reviewloop.rules.v1 import rules_pb2_grpc
from reviewloop.service import Peers

from gateway.settings import BACKENDS


class Backends:
    def __init__(self, peers: Peers, timeout_s: float) -> None:
        self.peers = peers
        self.timeout_s = timeout_s
        self.review = review_pb2_grpc.ReviewStateServiceStub(peers.channel("review_state"))
        self.nudge = nudge_pb2_grpc.NudgeServiceStub(peers.channel("nudge"))
        self.rules = rules_pb2_grpc.RulesServiceStub(peers.channel("rules"))
        self.diff = diff_pb2_grpc.DiffServiceStub(peers.channel("diff"))
        self.budget = budget_pb2_grpc.DispatchBudgetServiceStub(peers.channel("dispatch_budget"))

    async def health(self) -> dict[str, str]:
        """Each backend's health status name (SERVING, NOT_SERVING, or UNAVAILABLE)."""

        async def check(name: str) -> str:
            try:
                reply = await health_pb2_grpc.HealthStub(self.peers.channel(name)).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=1.0
                )
            except grpc.aio.AioRpcError:
                return "UNAVAILABLE"
            return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

        results = await asyncio.gather(*(check(name) for name in BACKENDS))
        return dict(zip(BACKENDS, results, strict=True))


async def backends(request: Request) -> Backends:
    # async, so FastAPI resolves it on the loop instead of hopping to its thread pool per request
    backends: Backends = request.app.state.backends
    return backends
