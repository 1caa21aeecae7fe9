"""The diff service as a real process: ComputeDiff and GetDiff over grpc.aio, errors as rich status."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import orjson
import pytest
from reviewloop.diff.v1 import diff_pb2, diff_pb2_grpc
from reviewloop.errors import Code
from reviewloop.ids import new_id
from reviewloop.rpc_errors import from_rpc_error
from reviewloop.tenancy import ActorKind, Principal
from stack.launcher import Stack

MIB = 1024 * 1024
TENANT = Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_1").to_proto()
OTHER_TENANT = Principal("org_2", "prj_2", ActorKind.REVIEW_AGENT, "agt_2").to_proto()


@pytest.fixture
async def diff_stub(stack: Stack) -> AsyncIterator[diff_pb2_grpc.DiffServiceStub]:
    async with grpc.aio.insecure_channel(stack.address("diff")) as channel:
        yield diff_pb2_grpc.DiffServiceStub(channel)


def request(review_id: str, body_after: str = "Can you do Thursday 2pm?") -> diff_pb2.ComputeDiffRequest:
    return diff_pb2.ComputeDiffRequest(
        principal=TENANT,
        review_id=review_id,
        from_revision=1,
        to_revision=2,
        before=diff_pb2.MessageFields(
            subject="Q3 pilot", body_text="Let me know your thoughts.", to=["vp@acme.com"]
        ),
        after=diff_pb2.MessageFields(
            subject="Q3 pilot: Thursday?", body_text=body_after, to=["vp@acme.com", "cto@acme.com"]
        ),
    )


async def test_compute_then_get_returns_the_stored_diff(diff_stub: diff_pb2_grpc.DiffServiceStub) -> None:
    review_id = new_id("rr")
    computed = await diff_stub.ComputeDiff(request(review_id))
    assert list(computed.fields_changed) == ["subject", "body_text", "to"]
    body = orjson.loads(computed.diff_json)
    assert body["fields_changed"] == ["subject", "body_text", "to"]
    assert [h["field"] for h in body["hunks"]] == ["subject", "body_text", "to"]
    typed = computed.structured
    assert list(typed.fields_changed) == body["fields_changed"]
    assert [(h.field, h.op, h.before, h.after) for h in typed.hunks] == [
        (h["field"], h["op"], h["before"], h["after"]) for h in body["hunks"]
    ]
    assert computed.diff_unified.startswith("--- a/subject\n+++ b/subject\n@@ -1 +1 @@\n")
    assert len(computed.input_sha256) == 64

    again = await diff_stub.ComputeDiff(request(review_id))
    assert again == computed
    got = await diff_stub.GetDiff(
        diff_pb2.GetDiffRequest(principal=TENANT, review_id=review_id, from_revision=1, to_revision=2)
    )
    assert got == computed


async def test_a_conflicting_recompute_is_refused_with_conflict(
    diff_stub: diff_pb2_grpc.DiffServiceStub,
) -> None:
    review_id = new_id("rr")
    stored = await diff_stub.ComputeDiff(request(review_id))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await diff_stub.ComputeDiff(request(review_id, body_after="Does Friday work?"))
    error = from_rpc_error(refused.value)
    assert error.code is Code.CONFLICT
    assert ("input_sha256", stored.input_sha256) in error.hints
    got = await diff_stub.GetDiff(
        diff_pb2.GetDiffRequest(principal=TENANT, review_id=review_id, from_revision=1, to_revision=2)
    )
    assert got == stored


async def test_over_2_mib_is_invalid_argument_and_nothing_is_stored(
    diff_stub: diff_pb2_grpc.DiffServiceStub,
) -> None:
    review_id = new_id("rr")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await diff_stub.ComputeDiff(request(review_id, body_after="x" * (2 * MIB + 1)))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    error = from_rpc_error(refused.value)
    assert error.code is Code.BAD_REQUEST
    assert error.violations[0].field == "/after/body_text"
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await diff_stub.GetDiff(
            diff_pb2.GetDiffRequest(principal=TENANT, review_id=review_id, from_revision=1, to_revision=2)
        )
    assert missing.value.code() is grpc.StatusCode.NOT_FOUND
    assert from_rpc_error(missing.value).code is Code.NOT_FOUND


async def test_two_bodies_of_2_mib_each_are_diffed(diff_stub: diff_pb2_grpc.DiffServiceStub) -> None:
    line = "x" * 1023 + "\n"
    body = line * (2 * MIB // len(line))
    message = request(new_id("rr"))
    message.before.body_text = body
    message.after.body_text = body.replace(line, "y" * 1023 + "\n", 1)
    computed = await diff_stub.ComputeDiff(message)
    assert "body_text" in computed.fields_changed


async def test_another_tenants_diff_reads_as_absent(diff_stub: diff_pb2_grpc.DiffServiceStub) -> None:
    review_id = new_id("rr")
    await diff_stub.ComputeDiff(request(review_id))
    with pytest.raises(grpc.aio.AioRpcError) as foreign:
        await diff_stub.GetDiff(
            diff_pb2.GetDiffRequest(
                principal=OTHER_TENANT, review_id=review_id, from_revision=1, to_revision=2
            )
        )
    assert foreign.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await diff_stub.GetDiff(diff_pb2.GetDiffRequest(review_id=review_id, from_revision=1, to_revision=2))
    assert anonymous.value.code() is grpc.StatusCode.UNAUTHENTICATED
