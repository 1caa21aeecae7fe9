"""The NudgeService servicer: translate protobuf, call ``app``, return protobuf."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc
from reviewloop.common.v1 import common_pb2
from reviewloop.nudge.v1 import nudge_pb2, nudge_pb2_grpc
from reviewloop.protoconv import stamp
from reviewloop.service import Registration
from reviewloop.tenancy import Principal

from nudge import app
from nudge.store import Nudge


def nudge_to_proto(nudge: Nudge) -> nudge_pb2.Nudge:
    return nudge_pb2.Nudge(
        seq=nudge.seq,
        id=nudge.id,
        reason=nudge.reason,
        review_id=nudge.review_id,
        category_id=nudge.category_id,
        payload_json=nudge.payload_json,
        created_at=stamp(nudge.created_at),
    )


class NudgeServicer(nudge_pb2_grpc.NudgeServiceServicer):
    def __init__(self, env: app.Env) -> None:
        self.db = env.db

    async def Ingest(
        self,
        request: common_pb2.IngestRequest,
        context: grpc.aio.ServicerContext[common_pb2.IngestRequest, common_pb2.IngestResponse],
    ) -> common_pb2.IngestResponse:
        accepted, duplicates = await app.ingest(self.db, request.events)
        return common_pb2.IngestResponse(accepted=accepted, duplicates=duplicates)

    async def ListEvents(
        self,
        request: nudge_pb2.ListEventsRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.ListEventsRequest, nudge_pb2.ListEventsResponse],
    ) -> nudge_pb2.ListEventsResponse:
        events, next_cursor = await app.list_events(
            self.db, Principal.from_proto(request.principal), limit=request.limit, cursor=request.cursor
        )
        return nudge_pb2.ListEventsResponse(
            events=[nudge_to_proto(e) for e in events], next_cursor=next_cursor
        )

    async def Ack(
        self,
        request: nudge_pb2.AckRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.AckRequest, nudge_pb2.AckResponse],
    ) -> nudge_pb2.AckResponse:
        acked = await app.ack(
            self.db, Principal.from_proto(request.principal), [(a.review_id, a.seq) for a in request.acks]
        )
        return nudge_pb2.AckResponse(acked=acked)

    async def WaitForEvents(
        self,
        request: nudge_pb2.WaitForEventsRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.WaitForEventsRequest, nudge_pb2.WaitForEventsResponse],
    ) -> nudge_pb2.WaitForEventsResponse:
        events = await app.wait_for_events(
            self.db, Principal.from_proto(request.principal), timeout_s=request.timeout_s, limit=request.limit
        )
        return nudge_pb2.WaitForEventsResponse(events=[nudge_to_proto(e) for e in events])

    async def Subscribe(
        self,
        request: nudge_pb2.SubscribeRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.SubscribeRequest, nudge_pb2.SubscribeResponse],
    ) -> AsyncIterator[nudge_pb2.SubscribeResponse]:
        principal = Principal.from_proto(request.principal)
        async for nudge, cursor in app.subscribe(self.db, principal, cursor=request.cursor):
            yield nudge_pb2.SubscribeResponse(nudge=nudge_to_proto(nudge), cursor=cursor)


def servicers(env: app.Env) -> Sequence[Registration]:
    return [
        (
            nudge_pb2_grpc.add_NudgeServiceServicer_to_server,
            NudgeServicer(env),
            "reviewloop.nudge.v1.NudgeService",
        )
    ]
