"""The webhook delivery queue filled in each nudge's own transaction: one pending delivery per endpoint
of the project that wants the reason (``nudge.app.ingest`` calls these inside its unit of work)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from reviewloop.review.v1.events_pb2 import Escalated, HumansNotified
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge import store
from nudge.domain import webhooks as rules
from nudge.domain.payloads import Broadcast, Incoming


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _nudge_event(incoming: Incoming, nudge_id: str, seq: int, created_at: datetime) -> dict[str, Any]:
    """A stored nudge as its webhook delivery tells it."""
    data: dict[str, Any] = {
        "seq": seq,
        "id": nudge_id,
        "reason": incoming.reason.value,
        "review_id": incoming.review_id,
    }
    if incoming.category_id:
        data["category_id"] = incoming.category_id
    data |= {"payload": incoming.payload, "created_at": _iso(created_at)}
    return {"type": "review_event", "timestamp": _iso(created_at), "data": data}


async def enqueue(
    conn: AsyncConnection, incoming: Incoming, nudge_id: str, seq: int, created_at: datetime
) -> bool:
    """In the nudge's own transaction: one pending delivery per endpoint of its project that wants it.
    Whether any was queued (the three ``enqueue`` functions answer so: the sender is woken only then)."""
    return await _enqueue(
        conn,
        incoming.org_id,
        incoming.project_id,
        incoming.reason.value,
        nudge_id,
        incoming.review_id,
        _nudge_event(incoming, nudge_id, seq, created_at),
        created_at,
    )


def deliveries_of_many(
    endpoints: dict[tuple[str, str], list[store.Endpoint]], stored: Sequence[store.Appended]
) -> list[dict[str, Any]]:
    """``enqueue``'s rows for a batch of stored nudges, in the nudges' order, given their projects'
    ``endpoints`` (``store.begin_batch`` reads them; ``store.append_many`` inserts the rows)."""
    return [
        row
        for n in stored
        for row in _deliveries(
            endpoints[n.incoming.org_id, n.incoming.project_id],
            n.incoming.reason.value,
            n.nudge_id,
            n.incoming.review_id,
            _nudge_event(n.incoming, n.nudge_id, n.seq, n.created_at),
            n.created_at,
        )
    ]


async def enqueue_broadcast(conn: AsyncConnection, broadcast: Broadcast, created_at: datetime) -> bool:
    """In the broadcast's own transaction: one pending delivery per endpoint that wants its reason, in its
    project (every project of the org for an org-wide one). The event reads as the drain shows it: ``seq``
    0, no ``review_id``; its id (``webhook-id``) is the broadcast's, the same for every endpoint, so a
    receiver dedupes on it."""
    data: dict[str, Any] = {"seq": 0, "id": broadcast.id, "reason": broadcast.reason.value}
    if broadcast.category_id:
        data["category_id"] = broadcast.category_id
    data |= {"payload": broadcast.payload, "created_at": _iso(created_at)}
    return await _enqueue(
        conn,
        broadcast.org_id,
        broadcast.project_id,
        broadcast.reason.value,
        broadcast.id,
        "",
        {"type": "review_event", "timestamp": _iso(created_at), "data": data},
        created_at,
    )


async def enqueue_humans_notified(conn: AsyncConnection, event: HumansNotified, created_at: datetime) -> bool:
    """In the event's own transaction: one pending delivery per endpoint of its project that asked for
    ``humans_notified``. Its id (``webhook-id``) is the review's humans_notified turn."""
    sent_at = _iso(event.created_at.ToDatetime(UTC)) if event.HasField("created_at") else _iso(created_at)
    data = {
        "id": event.turn_id,
        "review_id": event.review_id,
        "category_id": event.category_id,
        "agent_id": event.agent_id,
        "summary": event.summary,
        "subject": event.subject,
        "to": list(event.to),
        "cc": list(event.cc),
        "bcc": list(event.bcc),
        "created_at": sent_at,
    }
    return await _enqueue(
        conn,
        event.org_id,
        event.project_id,
        rules.HUMANS_NOTIFIED,
        event.turn_id,
        event.review_id,
        {"type": rules.HUMANS_NOTIFIED, "timestamp": _iso(created_at), "data": data},
        created_at,
    )


async def enqueue_escalated(conn: AsyncConnection, event: Escalated, created_at: datetime) -> bool:
    """In the event's own transaction: one pending delivery per endpoint of its project that asked for
    ``escalated``. Its id (``webhook-id``) is the escalation's decision turn."""
    target = (
        {"kind": event.target_kind, "id": event.target_id, "name": event.target_name}
        if event.target_kind
        else None
    )
    data = {
        "id": event.turn_id,
        "review_id": event.review_id,
        "category_id": event.category_id,
        "agent_id": event.agent_id,
        "revision": event.revision,
        "summary": event.summary,
        "subject": event.subject,
        "escalated_to": target,
        "deadline": _iso(event.deadline.ToDatetime(UTC)) if event.HasField("deadline") else None,
        "escalated_by": event.escalated_by,
        "feedback": event.feedback,
        "created_at": _iso(event.created_at.ToDatetime(UTC))
        if event.HasField("created_at")
        else _iso(created_at),
    }
    return await _enqueue(
        conn,
        event.org_id,
        event.project_id,
        rules.ESCALATED,
        event.turn_id,
        event.review_id,
        {"type": rules.ESCALATED, "timestamp": _iso(created_at), "data": data},
        created_at,
    )


async def _enqueue(
    conn: AsyncConnection,
    org_id: str,
    project_id: str,
    reason: str,
    event_id: str,
    review_id: str,
    event: dict[str, Any],
    created_at: datetime,
) -> bool:
    endpoints = await store.endpoints_of(conn, org_id, project_id)
    rows = _deliveries(endpoints, reason, event_id, review_id, event, created_at)
    await store.enqueue_deliveries(conn, rows)
    return bool(rows)


def _deliveries(
    endpoints: Sequence[store.Endpoint],
    reason: str,
    event_id: str,
    review_id: str,
    event: dict[str, Any],
    created_at: datetime,
) -> list[dict[str, Any]]:
    """One pending delivery row per endpoint of ``endpoints`` that wants ``reason``."""
    wanted = [e for e in endpoints if rules.wants(e.reasons, reason)]
    if not wanted:
        return []
    body = orjson.dumps(event).decode()
    return [
        {
            "endpoint_id": e.id,
            "event_id": event_id,
            "reason": reason,
            "review_id": review_id,
            "body": body,
            "status": "pending",
            "attempts": 0,
            "next_attempt_at": created_at,
            "created_at": created_at,
        }
        for e in wanted
    ]
