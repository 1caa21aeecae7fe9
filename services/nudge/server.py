"""The NudgeService servicer: translate protobuf, call one ``app`` use case per RPC, return protobuf."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import grpc
from reviewloop.common.v1 import common_pb2
from reviewloop.nudge.v1 import nudge_pb2, nudge_pb2_grpc
from reviewloop.protoconv import stamp
from reviewloop.service import Registration
from reviewloop.tenancy import Principal

from nudge import app
from nudge.store import Endpoint, Nudge


def nudge_to_proto(nudge: Nudge) -> nudge_pb2.Nudge:
    return nudge_pb2.Nudge(
        seq=nudge.seq,
        id=nudge.id,
        reason=nudge.reason,
        review_id=nudge.review_id,
        category_id=nudge.category_id,
        payload_json=nudge.payload_json,
        created_at=stamp(nudge.created_at),
        agent_id=nudge.agent_id,
        pos=nudge.pos,
    )


def cursors_to_proto(found: Mapping[str, tuple[int, int]]) -> list[nudge_pb2.Cursor]:
    """Each review's ack cursor and newest seq, in review_id order."""
    return [
        nudge_pb2.Cursor(review_id=r, last_acked_seq=acked, last_seq=last)
        for r, (acked, last) in sorted(found.items())
    ]


def webhook_to_proto(endpoint: Endpoint, secret_version: int) -> nudge_pb2.Webhook:
    return nudge_pb2.Webhook(
        id=endpoint.id,
        project_id=endpoint.project_id,
        url=endpoint.url,
        reasons=endpoint.reasons,
        created_at=stamp(endpoint.created_at),
        secret_version=secret_version,
    )


def delivery_to_proto(row: Any) -> nudge_pb2.WebhookDelivery:
    delivery = nudge_pb2.WebhookDelivery(
        event_id=row.event_id,
        reason=row.reason,
        review_id=row.review_id,
        status=row.status,
        attempts=row.attempts,
        last_status=row.last_status or 0,
        last_error=row.last_error or "",
        created_at=stamp(row.created_at),
    )
    if row.status == "pending":
        delivery.next_attempt_at.CopyFrom(stamp(row.next_attempt_at))
    if row.finished_at is not None:
        delivery.finished_at.CopyFrom(stamp(row.finished_at))
    return delivery


def _secret_response(registered: app.webhooks.Registered) -> nudge_pb2.WebhookSecretResponse:
    return nudge_pb2.WebhookSecretResponse(
        webhook=webhook_to_proto(registered.endpoint, registered.secret_version), secret=registered.secret
    )


class NudgeServicer(nudge_pb2_grpc.NudgeServiceServicer):
    def __init__(self, env: app.Env) -> None:
        self.db = env.db
        self.webhooks = env.settings.webhooks

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
        page = await app.list_with_cursors(
            self.db,
            Principal.from_proto(request.principal),
            limit=request.limit,
            cursor=request.cursor,
            review_id=request.review_id,
        )
        return nudge_pb2.ListEventsResponse(
            events=[nudge_to_proto(e) for e in page.events],
            next_cursor=page.next_cursor,
            cursors=cursors_to_proto(page.cursors),
        )

    async def Ack(
        self,
        request: nudge_pb2.AckRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.AckRequest, nudge_pb2.AckResponse],
    ) -> nudge_pb2.AckResponse:
        reply = await app.ack_with_cursors(
            self.db,
            Principal.from_proto(request.principal),
            [(a.review_id, a.seq) for a in request.acks],
            list(request.broadcast_ids),
        )
        return nudge_pb2.AckResponse(acked=reply.taken, cursors=cursors_to_proto(reply.cursors))

    async def WaitForEvents(
        self,
        request: nudge_pb2.WaitForEventsRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.WaitForEventsRequest, nudge_pb2.WaitForEventsResponse],
    ) -> nudge_pb2.WaitForEventsResponse:
        page = await app.wait_with_cursors(
            self.db,
            Principal.from_proto(request.principal),
            timeout_s=request.timeout_s,
            limit=request.limit,
            review_id=request.review_id,
        )
        return nudge_pb2.WaitForEventsResponse(
            events=[nudge_to_proto(e) for e in page.events], cursors=cursors_to_proto(page.cursors)
        )

    async def Subscribe(
        self,
        request: nudge_pb2.SubscribeRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.SubscribeRequest, nudge_pb2.SubscribeResponse],
    ) -> AsyncIterator[nudge_pb2.SubscribeResponse]:
        principal = Principal.from_proto(request.principal)
        async for nudge, cursor in app.subscribe(
            self.db, principal, cursor=request.cursor, from_head=request.from_head
        ):
            if nudge is None:
                yield nudge_pb2.SubscribeResponse(cursor=cursor)
            else:
                yield nudge_pb2.SubscribeResponse(nudge=nudge_to_proto(nudge), cursor=cursor)

    async def RegisterWebhook(
        self,
        request: nudge_pb2.RegisterWebhookRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.RegisterWebhookRequest, nudge_pb2.WebhookSecretResponse],
    ) -> nudge_pb2.WebhookSecretResponse:
        registered = await app.webhooks.register(
            self.db,
            self.webhooks,
            Principal.from_proto(request.principal),
            request.url,
            list(request.reasons),
        )
        return _secret_response(registered)

    async def ListWebhooks(
        self,
        request: nudge_pb2.ListWebhooksRequest,
        context: grpc.aio.ServicerContext[nudge_pb2.ListWebhooksRequest, nudge_pb2.ListWebhooksResponse],
    ) -> nudge_pb2.ListWebhooksResponse:
        listed = await app.webhooks.list_endpoints(self.db, Principal.from_proto(request.principal))
        return nudge_pb2.ListWebhooksResponse(webhooks=[webhook_to_proto(e, v) for e, v in listed])

    async def RotateWebhookSecret(
        self,
        request: nudge_pb2.RotateWebhookSecretRequest,
        context: grpc.aio.ServicerContext[
            nudge_pb2.RotateWebhookSecretRequest, nudge_pb2.WebhookSecretResponse
        ],
    ) -> nudge_pb2.WebhookSecretResponse:
        registered = await app.webhooks.rotate(
            self.db,
            self.webhooks,
            Principal.from_proto(request.principal),
            request.webhook_id,
            request.overlap_s,
        )
        return _secret_response(registered)

    async def DeleteWebhook(
        self,
        request: nudge_pb2.WebhookRef,
        context: grpc.aio.ServicerContext[nudge_pb2.WebhookRef, nudge_pb2.DeleteWebhookResponse],
    ) -> nudge_pb2.DeleteWebhookResponse:
        await app.webhooks.delete(self.db, Principal.from_proto(request.principal), request.webhook_id)
        return nudge_pb2.DeleteWebhookResponse(deleted=True)

    async def ListWebhookDeliveries(
        self,
        request: nudge_pb2.ListWebhookDeliveriesRequest,
        context: grpc.aio.ServicerContext[
            nudge_pb2.ListWebhookDeliveriesRequest, nudge_pb2.ListWebhookDeliveriesResponse
        ],
    ) -> nudge_pb2.ListWebhookDeliveriesResponse:
        rows = await app.webhooks.deliveries(
            self.db,
            Principal.from_proto(request.principal),
            request.webhook_id,
            status=request.status,
            limit=request.limit,
        )
        return nudge_pb2.ListWebhookDeliveriesResponse(deliveries=[delivery_to_proto(r) for r in rows])


def servicers(env: app.Env) -> Sequence[Registration]:
    return [
        (
            nudge_pb2_grpc.add_NudgeServiceServicer_to_server,
            NudgeServicer(env),
            "reviewloop.nudge.v1.NudgeService",
        )
    ]
