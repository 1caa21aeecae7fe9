"""Pushed events (issue 19): the server-sent event stream of the caller's nudges, and the console's
webhook endpoints (registered per project, delivered and signed by the nudge service)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated

import grpc
import orjson
from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import StreamingResponse
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.tenancy import Principal

from gateway.auth import ANY_PROJECT_KEY
from gateway.backends import Backends, backends
from gateway.responses import ShapedRoute
from gateway.translate.events import as_review_event

router = APIRouter(route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
Caller = Annotated[Principal, Depends(ANY_PROJECT_KEY)]

# The extension that keeps a route off the MCP tool list (a stream never answers a tool call).
NOT_A_TOOL = {"x-mcp-tool": False}
SSE_RESPONSES = {200: {"description": "text/event-stream", "content": {"text/event-stream": {}}}}


def sse_event(nudge: nudge_pb2.Nudge, cursor: str) -> bytes:
    """One nudge as a server-sent event: ``id`` is the resume point a reconnect sends back."""
    data = orjson.dumps(as_review_event(nudge))
    return b"id: %s\nevent: review_event\ndata: %s\n\n" % (cursor.encode(), data)


@router.get(
    "/v1/review-events/stream",
    tags=["review events"],
    operation_id="stream_review_events",
    response_class=StreamingResponse,
    responses=SSE_RESPONSES,  # type: ignore[arg-type]
    openapi_extra=NOT_A_TOOL,
)
async def stream_review_events(
    principal: Caller,
    backend: Backend,
    request: Request,
    last_event_id: Annotated[
        str,
        Header(
            alias="Last-Event-ID",
            pattern=r"^[0-9]{1,19}$",
            description="The `id` of the last event seen: the stream resumes right after it.",
        ),
    ] = "",
) -> StreamingResponse:
    """Server-sent events of the caller's un-acked nudges (`event: review_event`, `data` a ReviewEvent),
    in `seq` order per review, then each new one as it lands, on any gateway replica. Each event's `id`
    is a resume point: reconnect with `Last-Event-ID` to continue right after it, with no gap and no
    repeat. A nudge acked before it is read is never shown. A `: heartbeat` comment keeps proxies open."""
    call = backend.nudge.Subscribe(
        nudge_pb2.SubscribeRequest(principal=principal.to_proto(), cursor=last_event_id)
    )
    heartbeat_s = request.app.state.settings.sse_heartbeat_s

    async def events() -> AsyncIterator[bytes]:
        reader = aiter(call)
        pending: asyncio.Task[nudge_pb2.SubscribeResponse] | None = None
        try:
            yield b"retry: 1000\n: connected\n\n"
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(anext(reader))
                done, _ = await asyncio.wait({pending}, timeout=heartbeat_s)
                if not done:
                    yield b": heartbeat\n\n"
                    continue
                item, pending = pending.result(), None
                yield sse_event(item.nudge, item.cursor)
        except (StopAsyncIteration, grpc.aio.AioRpcError):
            return  # the client reconnects with Last-Event-ID
        finally:
            call.cancel()
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
