"""Recorded and sent messages, which replies and forwards name as parents and threads follow."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reviewloop.storage import UnitOfWork
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.domain.submission import Parent, ThreadContext
from review_state.store.tables import messages


@dataclass(frozen=True)
class Message:
    id: str
    org_id: str
    project_id: str
    direction: str
    rfc_message_id: str
    references_hdr: str
    thread_ref: str
    from_address: str
    to: list[str]
    cc: list[str]
    subject: str
    body_text: str
    headers: dict[str, str]
    created_at: datetime
    review_id: str | None = None

    def as_parent(self) -> Parent:
        reply_to = next((v for k, v in self.headers.items() if k.lower() == "reply-to"), None)
        return Parent(
            message_id=self.id,
            rfc_message_id=self.rfc_message_id,
            references=self.references_hdr,
            thread_ref=self.thread_ref,
            from_address=self.from_address,
            to=self.to,
            cc=self.cc,
            subject=self.subject,
            body_text=self.body_text,
            created_at=self.created_at,
            reply_to=reply_to,
            outbound=self.direction == "outbound",
        )


def _message(row: Any) -> Message:
    m = dict(row._mapping)
    return Message(
        id=m["id"],
        org_id=m["org_id"],
        project_id=m["project_id"],
        direction=m["direction"],
        rfc_message_id=m["rfc_message_id"],
        references_hdr=m["references_hdr"],
        thread_ref=m["thread_ref"],
        from_address=m["from_address"],
        to=m["to_addrs"],
        cc=m["cc_addrs"],
        subject=m["subject"],
        body_text=m["body_text"],
        headers=dict(m["headers"] or {}),
        created_at=m["created_at"],
        review_id=m["review_id"],
    )


def add_message(uow: UnitOfWork, message: Message) -> None:
    """Queue the message, written with the unit's last rows."""
    uow.insert(
        messages,
        {
            "id": message.id,
            "org_id": message.org_id,
            "project_id": message.project_id,
            "direction": message.direction,
            "rfc_message_id": message.rfc_message_id,
            "references_hdr": message.references_hdr,
            "thread_ref": message.thread_ref,
            "from_address": message.from_address,
            "to_addrs": list(message.to),
            "cc_addrs": list(message.cc),
            "subject": message.subject,
            "body_text": message.body_text,
            "headers": dict(message.headers),
            "review_id": message.review_id,
            "created_at": message.created_at,
        },
    )


async def get_message(conn: AsyncConnection, project_id: str, message_id: str) -> Message | None:
    row = (
        await conn.execute(
            select(messages).where(messages.c.id == message_id, messages.c.project_id == project_id)
        )
    ).first()
    return _message(row) if row else None


async def message_by_rfc_id(conn: AsyncConnection, project_id: str, rfc_message_id: str) -> Message | None:
    row = (
        await conn.execute(
            select(messages)
            .where(messages.c.project_id == project_id, messages.c.rfc_message_id == rfc_message_id)
            .limit(1)
        )
    ).first()
    return _message(row) if row else None


async def thread_context(conn: AsyncConnection, project_id: str, thread_ref: str) -> ThreadContext | None:
    """The thread as it is now (its message count and newest message), or None when this project has
    no such thread."""
    in_thread = (messages.c.project_id == project_id, messages.c.thread_ref == thread_ref)
    count = (await conn.execute(select(func.count()).where(*in_thread))).scalar_one()
    if not count:
        return None
    last = (
        await conn.execute(
            select(messages.c.id)
            .where(*in_thread)
            .order_by(messages.c.created_at.desc(), messages.c.id.desc())
            .limit(1)
        )
    ).scalar_one()
    return ThreadContext(thread_id=thread_ref, context_version=str(count), last_message_id=last)
