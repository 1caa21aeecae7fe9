"""The NudgeService servicer: translate protobuf, call ``app``, return protobuf."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from reviewloop.common.v1 import common_pb2
from reviewloop.nudge.v1 import nudge_pb2, nudge_pb2_grpc
from reviewloop.service import Peers, Registration
from reviewloop.storage import Database
from reviewloop.tenancy import Principal

from nudge import app


def nudge_to_proto(nudge: app.Nudge) -> nudge_pb2.Nudge:
    created = Timestamp()
    created.FromDatetime(nudge.created_at)
    return nudge_pb2.Nudge(
        seq=nudge.seq,
        id=nudge.id,
        reason=nudge.reason,
        review_id=nudge.review_id,
        category_id=nudge.category_id,
        payload_json=nudge.payload_json,
        created_at=created,
    )


class NudgeServicer(nudge_pb2_grpc.NudgeServiceServicer):
    def __init__(self, db: Database) -> None:
        self.db = db

    async def Ingest(
        self, request: common_pb2.IngestRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.IngestResponse:
        accepted, duplicates = await app.ingest(self.db, list(request.events))
        return common_pb2.IngestResponse(accepted=accepted, duplicates=duplicates)

    async def ListEvents(
        self, request: nudge_pb2.ListEventsRequest, context: grpc.aio.ServicerContext
    ) -> nudge_pb2.ListEventsResponse:
        events, next_cursor = await app.list_events(
            self.db, Principal.from_proto(request.principal), limit=request.limit, cursor=request.cursor
        )
        return nudge_pb2.ListEventsResponse(
            events=[nudge_to_proto(e) for e in events], next_cursor=next_cursor
        )

    async def Ack(
        self, request: nudge_pb2.AckRequest, context: grpc.aio.ServicerContext
    ) -> nudge_pb2.AckResponse:
        acked = await app.ack(
            self.db, Principal.from_proto(request.principal), [(a.review_id, a.seq) for a in request.acks]
        )
        return nudge_pb2.AckResponse(acked=acked)

    async def WaitForEvents(
        self, request: nudge_pb2.WaitForEventsRequest, context: grpc.aio.ServicerContext
    ) -> nudge_pb2.WaitForEventsResponse:
        events = await app.wait_for_events(
            self.db, Principal.from_proto(request.principal), timeout_s=request.timeout_s, limit=request.limit
        )
        return nudge_pb2.WaitForEventsResponse(events=[nudge_to_proto(e) for e in events])

    async def Subscribe(
        self, request: nudge_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[nudge_pb2.SubscribeResponse]:
        principal = Principal.from_proto(request.principal)
        async for nudge, cursor in app.subscribe(self.db, principal, cursor=request.cursor):
            yield nudge_pb2.SubscribeResponse(nudge=nudge_to_proto(nudge), cursor=cursor)


def servicers(db: Database, peers: Peers) -> Sequence[Registration]:
    return [
        (
            nudge_pb2_grpc.add_NudgeServiceServicer_to_server,
            NudgeServicer(db),
            "reviewloop.nudge.v1.NudgeService",
        )
    ]
