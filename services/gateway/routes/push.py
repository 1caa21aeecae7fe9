"""Pushed events (issue 19): the server-sent event stream of the caller's nudges, and the console's
webhook endpoints (registered per project, delivered and signed by the nudge service)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import grpc
import orjson
from fastapi import APIRouter, Depends, Header, Query, Request
from reviewloop import eventcursor
from reviewloop.eventcursor import Position
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.shapes import (
    ReviewEvent,
    RotateWebhookSecretIn,
    WebhookDeleted,
    WebhookDeliveryList,
    WebhookIn,
    WebhookList,
    WebhookSecret,
)
from reviewloop.tenancy import Principal
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.auth import ANY_PROJECT_KEY, Caller, authenticate, console_principal, require_admin
from gateway.backends import Backends, backends
from gateway.feeds import FeedEnded, Feeds, Listener, is_broadcast
from gateway.responses import ShapedRoute, replay_answer
from gateway.translate import Json
from gateway.translate.events import as_review_event
from gateway.translate.push import as_delivery, as_webhook

router = APIRouter(route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
AnyKey = Annotated[Principal, Depends(ANY_PROJECT_KEY)]
Admin = Annotated[Caller, Depends(require_admin)]

# The extension that keeps a route off the MCP tool list (a stream never answers a tool call).
NOT_A_TOOL = {"x-mcp-tool": False}


REVIEW_EVENT_REF = "#/components/schemas/ReviewEvent"


class EventStream(EventSourceResponse):
    """Server-sent events (sse-starlette); the route's ``response_model`` documents each event's ``data``."""

    media_type = "text/event-stream"


def sse_event(nudge: nudge_pb2.Nudge, cursor: Position) -> ServerSentEvent:
    """One nudge as a server-sent event: ``id`` is the resume point a reconnect sends back."""
    return ServerSentEvent(
        orjson.dumps(as_review_event(nudge)).decode(), id=str(cursor), event="review_event", sep="\n"
    )


def heartbeat() -> ServerSentEvent:
    return ServerSentEvent(comment="heartbeat", sep="\n")


# One backlog page of a stream that (re)connects.
BACKLOG_PAGE = 200


@router.get(
    "/v1/review-events/stream",
    tags=["review events"],
    operation_id="stream_review_events",
    response_class=EventStream,
    response_model=ReviewEvent,
    responses={200: {"content": {EventStream.media_type: {"schema": {"$ref": REVIEW_EVENT_REF}}}}},
    openapi_extra=NOT_A_TOOL,
)
async def stream_review_events(
    principal: AnyKey,
    backend: Backend,
    request: Request,
    last_event_id: Annotated[
        str,
        Header(
            alias="Last-Event-ID",
            pattern=eventcursor.PATTERN,
            description="The `id` of the last event seen: the stream resumes right after it.",
        ),
    ] = "",
) -> EventStream:
    """Server-sent events of the caller's un-acked nudges and broadcasts (`event: review_event`, `data` a
    ReviewEvent), in `seq` order per review, then each new one as it lands, on any gateway replica. Each
    event's `id` is a resume point: reconnect with `Last-Event-ID` to continue right after it, with no gap
    and no repeat. A nudge acked before it is read is never shown. A `: heartbeat` comment keeps proxies
    open. All of a project's streams on one gateway share one read of the nudge service. Open streams are
    capped per key (a new one closes the key's stream idle longest) and per project (a new one past it is
    `429 rate_limited` with Retry-After)."""
    settings = request.app.state.settings
    feeds: Feeds = request.app.state.feeds
    start = Position.parse(last_event_id)
    caller = await authenticate(request)  # the key cache's: the dependency just read it
    listener = feeds.admit(principal, caller.key_id or "")

    return EventStream(
        _events(backend, principal, feeds, listener, start),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        ping=settings.sse_heartbeat_s,
        ping_message_factory=heartbeat,
        sep="\n",
    )


async def _events(
    backend: Backends, principal: Principal, feeds: Feeds, listener: Listener, start: Position
) -> AsyncIterator[ServerSentEvent]:
    """One stream: the backlog after ``start``, to its end, then the project's live tail past it."""
    try:
        yield ServerSentEvent(retry=1000, comment="connected", sep="\n")
        async with feeds.join(listener) as joined_at:
            position = start
            while True:  # the backlog after Last-Event-ID, to its end
                page = await backend.nudge.ListEvents(
                    nudge_pb2.ListEventsRequest(
                        principal=principal.to_proto(), limit=BACKLOG_PAGE, cursor=str(position)
                    ),
                    timeout=backend.timeout_s,
                )
                for nudge in page.events:
                    position = position.past(nudge.pos, broadcast=is_broadcast(nudge))
                    listener.sent()
                    yield sse_event(nudge, position)
                if not page.next_cursor or listener.evicted:
                    break
            position = position.join(joined_at)
            while True:  # then the project's live tail, past what was read
                nudge = await listener.next()
                broadcast = is_broadcast(nudge)
                if not position.covers(nudge.pos, broadcast=broadcast):
                    position = position.past(nudge.pos, broadcast=broadcast)
                    listener.sent()
                    yield sse_event(nudge, position)
    except (FeedEnded, grpc.aio.AioRpcError):
        return  # the client reconnects with Last-Event-ID
    finally:
        feeds.release(listener)


SHOWN_ONCE = (
    "This secret was issued by an earlier request with this Idempotency-Key and shown once; if it was "
    "lost, rotate the webhook's secret."
)
WEBHOOKS = "/v1/admin/projects/{project_id}/webhooks"


def _secret_answer(request: Request, reply: nudge_pb2.WebhookSecretResponse) -> Json:
    webhook = as_webhook(reply.webhook)
    replay_answer(request, {"webhook": webhook, "secret": None, "note": SHOWN_ONCE})
    return {"webhook": webhook, "secret": reply.secret}


@router.post(
    WEBHOOKS, tags=["console"], status_code=201, operation_id="register_webhook", response_model=WebhookSecret
)
async def register_webhook(
    project_id: str, body: WebhookIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Register an endpoint the project's nudges are POSTed to (those of `reasons`, or all), signed
    with HMAC-SHA256 in the Standard Webhooks layout (`webhook-id`, `webhook-timestamp`,
    `webhook-signature: v1,<base64>`). The `secret` is shown once. A URL that is, or resolves to, a
    loopback, link-local or private address is refused unless the deployment allows that network."""
    principal = await console_principal(caller, request, project_id)
    reply = await backend.nudge.RegisterWebhook(
        nudge_pb2.RegisterWebhookRequest(principal=principal.to_proto(), url=body.url, reasons=body.reasons),
        timeout=backend.timeout_s,
    )
    return _secret_answer(request, reply)


@router.get(WEBHOOKS, tags=["console"], operation_id="list_webhooks", response_model=WebhookList)
async def list_webhooks(project_id: str, caller: Admin, request: Request, backend: Backend) -> Json:
    """The project's webhook endpoints (never their secrets)."""
    principal = await console_principal(caller, request, project_id)
    reply = await backend.nudge.ListWebhooks(
        nudge_pb2.ListWebhooksRequest(principal=principal.to_proto()), timeout=backend.timeout_s
    )
    return {"webhooks": [as_webhook(w) for w in reply.webhooks]}


@router.post(
    WEBHOOKS + "/{webhook_id}/rotate-secret",
    tags=["console"],
    operation_id="rotate_webhook_secret",
    response_model=WebhookSecret,
)
async def rotate_webhook_secret(
    project_id: str,
    webhook_id: str,
    body: RotateWebhookSecretIn,
    caller: Admin,
    request: Request,
    backend: Backend,
) -> Json:
    """A new secret, shown once. For `overlap_s` (default a day) each delivery carries a signature with
    the previous secret too, so receivers can switch without dropping one."""
    principal = await console_principal(caller, request, project_id)
    reply = await backend.nudge.RotateWebhookSecret(
        nudge_pb2.RotateWebhookSecretRequest(
            principal=principal.to_proto(), webhook_id=webhook_id, overlap_s=body.overlap_s
        ),
        timeout=backend.timeout_s,
    )
    return _secret_answer(request, reply)


@router.delete(
    WEBHOOKS + "/{webhook_id}", tags=["console"], operation_id="delete_webhook", response_model=WebhookDeleted
)
async def delete_webhook(
    project_id: str, webhook_id: str, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Remove the endpoint; its pending deliveries are dropped."""
    principal = await console_principal(caller, request, project_id)
    await backend.nudge.DeleteWebhook(
        nudge_pb2.WebhookRef(principal=principal.to_proto(), webhook_id=webhook_id), timeout=backend.timeout_s
    )
    return {"webhook_id": webhook_id, "deleted": True}


@router.get(
    WEBHOOKS + "/{webhook_id}/deliveries",
    tags=["console"],
    operation_id="list_webhook_deliveries",
    response_model=WebhookDeliveryList,
)
async def list_webhook_deliveries(
    project_id: str,
    webhook_id: str,
    caller: Admin,
    request: Request,
    backend: Backend,
    status: Annotated[str, Query(pattern="^(pending|delivered|failed)?$")] = "",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Json:
    """The endpoint's deliveries, newest first: each `pending` one with its next attempt, `delivered`
    ones with the receiver's 2xx, `failed` ones (retried for the deployment's bound) with the last error."""
    principal = await console_principal(caller, request, project_id)
    reply = await backend.nudge.ListWebhookDeliveries(
        nudge_pb2.ListWebhookDeliveriesRequest(
            principal=principal.to_proto(), webhook_id=webhook_id, status=status, limit=limit
        ),
        timeout=backend.timeout_s,
    )
    return {"deliveries": [as_delivery(d) for d in reply.deliveries]}
