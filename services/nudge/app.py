"""nudge use cases: ingest from the outbox relays, list, ack. One transaction each."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.storage import Database, UnitOfWork, first_delivery, utcnow
from reviewloop.storage.schema import insert_ignore
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import and_, select, update

from nudge.domain.reasons import Reason, refusal
from nudge.store import nudges, review_heads

log = logging.getLogger(__name__)

LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200
MAX_ACKS = 100


@dataclass(frozen=True)
class Nudge:
    pos: int
    seq: int
    id: str
    reason: str
    review_id: str
    category_id: str
    payload: dict[str, Any]
    created_at: datetime


async def ingest(db: Database, events: list[Any]) -> tuple[int, int]:
    """Store each ``nudge`` event once (deduplicated on event_id), assigning the review's next seq."""
    accepted = duplicates = 0
    for event in events:
        async with db.transaction() as uow:
            if not await first_delivery(uow.conn, event.event_id):
                duplicates += 1
                continue
            accepted += 1
            if event.type != "nudge":
                log.warning("nudge ignores event type %s (%s)", event.type, event.event_id)
                continue
            await _append(uow, orjson.loads(event.payload))
    return accepted, duplicates


async def _append(uow: UnitOfWork, body: dict[str, Any]) -> None:
    conn = uow.conn
    review_id = body["review_id"]
    try:
        reason = Reason(body["reason"])
    except ValueError:
        log.error("refused nudge for %s: unknown reason %r", review_id, body.get("reason"))
        return
    await conn.execute(
        insert_ignore(conn, review_heads).values(
            review_id=review_id,
            org_id=body["org_id"],
            project_id=body["project_id"],
            agent_id=body["agent_id"],
            last_seq=0,
            acked_seq=0,
            terminal_reasons=[],
        )
    )
    head = (
        await conn.execute(
            select(review_heads).where(review_heads.c.review_id == review_id).with_for_update()
        )
    ).one()
    why_not = refusal(reason, list(head.terminal_reasons))
    if why_not:
        log.error("refused nudge for %s: %s", review_id, why_not)
        return
    payload = body.get("payload", {})
    collapse_key = None
    if reason is Reason.FRONT_RUN_NEXT:
        # A retry loop hammering the same 409 collapses to one row.
        collapse_key = f"{review_id}:{payload.get('state')}:{payload.get('your_parent_revision')}"
    seq = head.last_seq + 1
    inserted = await conn.execute(
        insert_ignore(conn, nudges).values(
            id=new_id("ndg"),
            review_id=review_id,
            seq=seq,
            reason=reason.value,
            payload=orjson.dumps(payload).decode(),
            category_id=body.get("category_id", ""),
            collapse_key=collapse_key,
            created_at=utcnow(),
        )
    )
    if inserted.rowcount != 1:
        return  # collapsed into an earlier identical front_run_next
    terminal = list(head.terminal_reasons)
    if reason in (Reason.SENT, Reason.SEND_FAILED, Reason.CANCELLED):
        terminal.append(reason.value)
    await conn.execute(
        update(review_heads)
        .where(review_heads.c.review_id == review_id)
        .values(last_seq=seq, terminal_reasons=terminal)
    )


def _visible(principal: Principal) -> Any:
    """An agent sees the nudges of reviews it composed; other actors see their project's."""
    condition = review_heads.c.project_id == principal.project_id
    if principal.actor_kind is ActorKind.AGENT:
        condition = and_(condition, review_heads.c.agent_id == principal.actor_id)
    return condition


def _parse_cursor(cursor: str) -> int:
    if not cursor:
        return 0
    try:
        return int(cursor)
    except ValueError as exc:
        raise DomainError(
            Code.BAD_REQUEST, "cursor is not one this service issued; pass next_cursor as given."
        ) from exc


async def list_events(
    db: Database, principal: Principal, *, limit: int, cursor: str
) -> tuple[list[Nudge], str]:
    """The caller's un-acked nudges, oldest first."""
    if limit < 0 or limit > LIST_LIMIT_MAX:
        raise DomainError(Code.BAD_REQUEST, f"limit must be between 1 and {LIST_LIMIT_MAX}.")
    limit = limit or LIST_LIMIT_DEFAULT
    after = _parse_cursor(cursor)
    query = (
        select(nudges)
        .join(review_heads, review_heads.c.review_id == nudges.c.review_id)
        .where(_visible(principal), nudges.c.seq > review_heads.c.acked_seq, nudges.c.pos > after)
        .order_by(nudges.c.pos)
        .limit(limit + 1)
    )
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    events = [
        Nudge(
            pos=r.pos,
            seq=r.seq,
            id=r.id,
            reason=r.reason,
            review_id=r.review_id,
            category_id=r.category_id,
            payload=orjson.loads(r.payload),
            created_at=r.created_at,
        )
        for r in rows[:limit]
    ]
    next_cursor = str(events[-1].pos) if len(rows) > limit else ""
    return events, next_cursor


async def ack(db: Database, principal: Principal, acks: list[tuple[str, int]]) -> int:
    """Advance each review's ack cursor (monotonic, idempotent). All or nothing."""
    if not acks:
        raise DomainError(Code.BAD_REQUEST, "acks: give at least one {review_id, seq}.")
    if len(acks) > MAX_ACKS:
        raise DomainError(Code.BAD_REQUEST, f"acks: at most {MAX_ACKS} per call.")
    async with db.transaction() as uow:
        for review_id, seq in acks:
            head = (
                await uow.conn.execute(
                    select(review_heads).where(review_heads.c.review_id == review_id, _visible(principal))
                )
            ).first()
            if head is None:
                raise DomainError(Code.NOT_FOUND, f"No events of review {review_id} are visible to this key.")
            if seq < 1 or seq > head.last_seq:
                raise DomainError(
                    Code.BAD_REQUEST,
                    f"acks: seq {seq} of {review_id} is past its head ({head.last_seq}); "
                    "ack only seqs you received.",
                )
            await uow.conn.execute(
                update(review_heads)
                .where(review_heads.c.review_id == review_id, review_heads.c.acked_seq < seq)
                .values(acked_seq=seq)
            )
    return len(acks)
