"""The review_state store: reviews and idempotency keys, in the domain's words."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from reviewloop.storage.schema import Json, new_metadata
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.domain.machine import State

metadata = new_metadata()

reviews = Table(
    "reviews",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    Column("category_id", String(40), nullable=False, server_default=""),
    Column("kind", String(16), nullable=False),
    Column("state", String(24), nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("to_addrs", Json, nullable=False),
    Column("cc_addrs", Json, nullable=False),
    Column("bcc_addrs", Json, nullable=False),
    Column("subject", Text, nullable=False),
    Column("body_text", Text, nullable=False),
    Column("intent", Json),
    Column("parent_message_id", String(40)),
    Column("message_id", String(40)),
    Column("thread_ref", String(40)),
    Column("send_path", String(24)),
    Column("send_error", Text),
    Column("gate_outcome", String(64)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Index("ix_reviews_project_id_id", "project_id", "id"),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("project_id", String(40), nullable=False),
    Column("actor_id", String(40), nullable=False),
    Column("key", String(255), nullable=False),
    Column("request_hash", String(64), nullable=False),
    Column("review_id", String(40), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("project_id", "actor_id", "key"),
)


@dataclass(frozen=True)
class Review:
    id: str
    org_id: str
    project_id: str
    agent_id: str
    category_id: str
    kind: str
    state: State
    revision: int
    version: int
    to: list[str]
    cc: list[str]
    bcc: list[str]
    subject: str
    body_text: str
    intent: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    parent_message_id: str | None = None
    message_id: str | None = None
    thread_ref: str | None = None
    send_path: str | None = None
    send_error: str | None = None
    gate_outcome: str | None = None


def _from_row(row: Any) -> Review:
    m = row._mapping
    return Review(
        id=m["id"],
        org_id=m["org_id"],
        project_id=m["project_id"],
        agent_id=m["agent_id"],
        category_id=m["category_id"],
        kind=m["kind"],
        state=State(m["state"]),
        revision=m["revision"],
        version=m["version"],
        to=m["to_addrs"],
        cc=m["cc_addrs"],
        bcc=m["bcc_addrs"],
        subject=m["subject"],
        body_text=m["body_text"],
        intent=m["intent"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        parent_message_id=m["parent_message_id"],
        message_id=m["message_id"],
        thread_ref=m["thread_ref"],
        send_path=m["send_path"],
        send_error=m["send_error"],
        gate_outcome=m["gate_outcome"],
    )


def _to_row(review: Review) -> dict[str, Any]:
    return {
        "id": review.id,
        "org_id": review.org_id,
        "project_id": review.project_id,
        "agent_id": review.agent_id,
        "category_id": review.category_id,
        "kind": review.kind,
        "state": review.state.value,
        "revision": review.revision,
        "version": review.version,
        "to_addrs": review.to,
        "cc_addrs": review.cc,
        "bcc_addrs": review.bcc,
        "subject": review.subject,
        "body_text": review.body_text,
        "intent": review.intent,
        "parent_message_id": review.parent_message_id,
        "message_id": review.message_id,
        "thread_ref": review.thread_ref,
        "send_path": review.send_path,
        "send_error": review.send_error,
        "gate_outcome": review.gate_outcome,
        "created_at": review.created_at,
        "updated_at": review.updated_at,
    }


async def add_review(conn: AsyncConnection, review: Review) -> None:
    await conn.execute(insert(reviews).values(**_to_row(review)))


async def get_review(conn: AsyncConnection, project_id: str, review_id: str) -> Review | None:
    """The review, if it belongs to ``project_id``; another tenant's review reads as absent."""
    row = (
        await conn.execute(
            select(reviews).where(reviews.c.id == review_id, reviews.c.project_id == project_id)
        )
    ).first()
    return _from_row(row) if row else None


async def list_reviews(
    conn: AsyncConnection,
    project_id: str,
    *,
    states: list[str],
    agent_id: str,
    category_id: str,
    before_id: str,
    limit: int,
) -> list[Review]:
    """Newest first; ``before_id`` is the keyset cursor (ids sort by creation time)."""
    query = select(reviews).where(reviews.c.project_id == project_id)
    if states:
        query = query.where(reviews.c.state.in_(states))
    if agent_id:
        query = query.where(reviews.c.agent_id == agent_id)
    if category_id:
        query = query.where(reviews.c.category_id == category_id)
    if before_id:
        query = query.where(reviews.c.id < before_id)
    rows = await conn.execute(query.order_by(reviews.c.id.desc()).limit(limit))
    return [_from_row(row) for row in rows]


async def compare_and_set(conn: AsyncConnection, current: Review, **changes: Any) -> Review | None:
    """Write ``changes`` only if the row is still at ``current.version``; the row count decides.

    Returns the new review, or None when another writer got there first.
    """
    updated = replace(current, version=current.version + 1, **changes)
    values = {k: v for k, v in _to_row(updated).items() if k not in ("id", "created_at")}
    result = await conn.execute(
        update(reviews)
        .where(reviews.c.id == current.id, reviews.c.version == current.version)
        .values(**values)
    )
    return updated if result.rowcount == 1 else None


async def find_idempotent(conn: AsyncConnection, project_id: str, actor_id: str, key: str) -> Any:
    return (
        await conn.execute(
            select(idempotency_keys.c.request_hash, idempotency_keys.c.review_id).where(
                idempotency_keys.c.project_id == project_id,
                idempotency_keys.c.actor_id == actor_id,
                idempotency_keys.c.key == key,
            )
        )
    ).first()


async def remember_idempotent(
    conn: AsyncConnection,
    project_id: str,
    actor_id: str,
    key: str,
    request_hash: str,
    review_id: str,
    now: datetime,
) -> None:
    await conn.execute(
        insert(idempotency_keys).values(
            project_id=project_id,
            actor_id=actor_id,
            key=key,
            request_hash=request_hash,
            review_id=review_id,
            created_at=now,
        )
    )
