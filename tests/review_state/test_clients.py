"""Calls to other contexts fail closed: a peer that is down or not built yet is ``unavailable``, and
the use case that needed it writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from review_state import app
from review_state.app import Env
from review_state.clients import GrpcCollaborators
from reviewloop.budget.v1 import budget_pb2_grpc
from reviewloop.diff.v1 import diff_pb2_grpc
from reviewloop.errors import Code, DomainError
from reviewloop.rules.v1 import rules_pb2_grpc
from reviewloop.service import Peers
from stack.launcher import free_port

from tests.review_state.conftest import AGENT, HUMAN, opened, outbox, queued


@pytest.fixture
async def unimplemented() -> AsyncIterator[str]:
    """A real gRPC server whose rules, diff and budget services answer UNIMPLEMENTED."""
    server = grpc.aio.server()
    rules_pb2_grpc.add_RulesServiceServicer_to_server(rules_pb2_grpc.RulesServiceServicer(), server)
    diff_pb2_grpc.add_DiffServiceServicer_to_server(diff_pb2_grpc.DiffServiceServicer(), server)
    budget_pb2_grpc.add_DispatchBudgetServiceServicer_to_server(
        budget_pb2_grpc.DispatchBudgetServiceServicer(), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(None)


@pytest.mark.parametrize("where", ["unimplemented", "down"])
async def test_a_peer_that_is_not_there_fails_closed(env: Env, unimplemented: str, where: str) -> None:
    address = unimplemented if where == "unimplemented" else f"127.0.0.1:{free_port()}"
    peers = Peers({"rules": address, "diff": address, "dispatch_budget": address})
    env.peers = GrpcCollaborators(peers)
    try:
        with pytest.raises(DomainError) as token:
            await queued(env, composition_token="tok")
        assert token.value.code is Code.UNAVAILABLE and "nothing was written" in token.value.detail
        review = await opened(env)
        before = len(await outbox(env))
        with pytest.raises(DomainError) as edit:
            await app.decide(
                env, HUMAN, review.id, app.Decision("edit", review.revision, review.version, body="x")
            )
        assert edit.value.code is Code.UNAVAILABLE
        current, _ = await app.get_review(env, AGENT, review.id)
        assert (current.version, current.state.value) == (review.version, "in_review")
        assert len(await outbox(env)) == before
    finally:
        await peers.close()
