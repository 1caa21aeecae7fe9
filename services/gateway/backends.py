"""Stubs for every backend service, over the shared traced channels."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from fastapi import Request
from grpc_health.v1 import health_pb2, health_pb2_grpc
from reviewloop.budget.v1 import budget_pb2_grpc
from reviewloop.common.v1 import outbox_pb2, outbox_pb2_grpc
from reviewloop.diff.v1 import diff_pb2_grpc
from reviewloop.errors import Code, DomainError
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
        # Every service's operator RPC over its own outbox (dead letters).
        self.outbox = {name: outbox_pb2_grpc.OutboxAdminServiceStub(peers.channel(name)) for name in BACKENDS}

    async def health(self) -> dict[str, str]:
        """Each backend's health status name (SERVING, NOT_SERVING, or UNAVAILABLE)."""

        async def check(name: str) -> str:
            # Any: types-grpcio-health-checking 1.0.0.20261021 declares HealthStub without its methods.
            stub: Any = health_pb2_grpc.HealthStub(self.peers.channel(name))
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
            except grpc.aio.AioRpcError:
                return "UNAVAILABLE"
            return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

        results = await asyncio.gather(*(check(name) for name in BACKENDS))
        return dict(zip(BACKENDS, results, strict=True))

    # --- dead letters: each service keeps its own outbox --------------------------------------------

    async def dead_letters(self, principal: Any) -> list[outbox_pb2.DeadLetter]:
        """The principal's project's dead letters across every service, newest first."""
        asked = outbox_pb2.ListDeadLettersRequest(principal=principal)
        replies = await asyncio.gather(
            *(stub.ListDeadLetters(asked, timeout=self.timeout_s) for stub in self.outbox.values())
        )
        letters = [letter for reply in replies for letter in reply.dead_letters]
        return sorted(letters, key=lambda letter: letter.dead_at.ToNanoseconds(), reverse=True)

    async def retry_dead_letter(self, asked: outbox_pb2.RetryDeadLetterRequest) -> outbox_pb2.DeadLetter:
        """Hand the dead letter back to the relay of the service that holds it."""
        return await self._on_holder(
            asked.event_id, lambda stub: stub.RetryDeadLetter(asked, timeout=self.timeout_s)
        )

    async def discard_dead_letter(self, asked: outbox_pb2.DiscardDeadLetterRequest) -> outbox_pb2.DeadLetter:
        """Discard the dead letter at the service that holds it."""
        return await self._on_holder(
            asked.event_id, lambda stub: stub.DiscardDeadLetter(asked, timeout=self.timeout_s)
        )

    async def _on_holder(
        self, event_id: str, call: Callable[[Any], Awaitable[outbox_pb2.DeadLetter]]
    ) -> outbox_pb2.DeadLetter:
        # Event ids are unique across services: the one that holds it answers, the others NOT_FOUND.
        for stub in self.outbox.values():
            try:
                return await call(stub)
            except grpc.aio.AioRpcError as error:
                if error.code() is not grpc.StatusCode.NOT_FOUND:
                    raise
        raise DomainError(Code.NOT_FOUND, f"No dead letter {event_id} of this project.")


async def backends(request: Request) -> Backends:
    # async, so FastAPI resolves it on the loop instead of hopping to its thread pool per request
    backends: Backends = request.app.state.backends
    return backends
