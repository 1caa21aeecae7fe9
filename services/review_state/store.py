"""The review_state store: reviews, turns, messages and threads, contacts, the review policy, delivery
attempts and idempotency keys, in the domain's words."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from reviewloop.storage.idempotency import idempotency_table
from reviewloop.storage.schema import Json, UtcDateTime, insert_ignore, new_metadata
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.domain.machine import PENDING, State
from review_state.domain.review import Review, Turn
from review_state.domain.submission import Attachment, Parent

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
    Column("body_html", Text),
    Column("reply_to", String(320)),
    Column("headers", Json, nullable=False),
    Column("attachments", Json, nullable=False),
    Column("from_address", String(320), nullable=False),
    Column("intent", Json),
    Column("confidence", Float),
    Column("rule_high_water", BigInteger, nullable=False, server_default="0"),
    Column("parent_message_id", String(40)),
    Column("in_reply_to", Text),
    Column("references_hdr", Text),
    Column("message_id", String(40)),
    Column("rfc_message_id", String(255)),
    Column("thread_ref", String(40)),
    Column("send_path", String(24)),
    Column("send_error", Text),
    Column("gate_outcome", String(64)),
    Column("reviewer_hops", Integer, nullable=False, server_default="0"),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("decided_at", UtcDateTime),
    Column("sent_at", UtcDateTime),
    Index("ix_reviews_project_id_id", "project_id", "id"),
    Index("ix_reviews_org_id_state", "org_id", "state"),
)

turns = Table(
    "turns",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("review_id", String(40), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("turn_type", String(24), nullable=False),
    Column("actor_kind", String(16), nullable=False),
    Column("actor_id", String(40), nullable=False),
    Column("body", Text, nullable=False, server_default=""),
    Column("revision", BigInteger, nullable=False),
    Column("action", String(16), nullable=False, server_default=""),
    Column("changed", Boolean, nullable=False, server_default="0"),
    Column("diff_json", Json),
    Column("diff_unified", Text),
    Column("rule_ids", Json, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_turns_review_id_seq", "review_id", "seq", unique=True),
)

messages = Table(
    "messages",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("direction", String(8), nullable=False),  # inbound | outbound
    Column("rfc_message_id", String(255), nullable=False),
    Column("references_hdr", Text, nullable=False, server_default=""),
    Column("thread_ref", String(40), nullable=False),
    Column("from_address", String(320), nullable=False),
    Column("to_addrs", Json, nullable=False),
    Column("cc_addrs", Json, nullable=False),
    Column("subject", Text, nullable=False),
    Column("body_text", Text, nullable=False),
    Column("headers", Json, nullable=False),
    Column("review_id", String(40)),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_messages_project_id_rfc_message_id", "project_id", "rfc_message_id"),
    Index("ix_messages_project_id_direction_created_at", "project_id", "direction", "created_at"),
)

review_policies = Table(
    "review_policies",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("policy", String(32), nullable=False),
    Column("updated_by", String(40), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

contacts = Table(
    "contacts",
    metadata,
    Column("project_id", String(40), nullable=False),
    Column("address", String(320), nullable=False),
    Column("blocked", Boolean, nullable=False, server_default="0"),
    Column("suppressed", Boolean, nullable=False, server_default="0"),
    # Set once mail went to or came from the address: it is no longer a first contact.
    Column("contacted_at", UtcDateTime),
    Column("updated_at", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("project_id", "address"),
)

# One attempt per review: a failed send is never re-sent, so the row is the whole delivery history.
delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("review_id", String(40), primary_key=True),
    Column("project_id", String(40), nullable=False),
    Column("message_id", String(40), nullable=False),
    Column("rfc_message_id", String(255), nullable=False),
    Column("send_path", String(24), nullable=False),
    Column("status", String(16), nullable=False),  # in_flight | delivered | refused
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
    Column("error", Text),
    Index("ix_delivery_attempts_status_started_at", "status", "started_at"),
)

idempotency_keys = idempotency_table(
    metadata,
    Column("review_id", String(40), nullable=False),
    Column("result_id", String(40), nullable=False, server_default=""),
)


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
        )


_COLUMN = {"to": "to_addrs", "cc": "cc_addrs", "bcc": "bcc_addrs"}


def _attachments_to_json(items: Sequence[Attachment]) -> list[dict[str, str]]:
    return [
        {
            "filename": a.filename,
            "content_type": a.content_type,
            "content_base64": base64.b64encode(a.content).decode(),
        }
        for a in items
    ]


def _attachments_from_json(items: list[dict[str, str]]) -> tuple[Attachment, ...]:
    return tuple(
        Attachment(a["filename"], a["content_type"], base64.b64decode(a["content_base64"])) for a in items
    )


def _from_row(row: Any) -> Review:
    m = dict(row._mapping)
    values: dict[str, Any] = {}
    for name in Review.__dataclass_fields__:
        column = _COLUMN.get(name, name)
        values[name] = m[column]
    values["state"] = State(m["state"])
    values["attachments"] = _attachments_from_json(m["attachments"] or [])
    values["headers"] = dict(m["headers"] or {})
    return Review(**values)


def _to_row(review: Review) -> dict[str, Any]:
    row = {_COLUMN.get(name, name): getattr(review, name) for name in Review.__dataclass_fields__}
    row["state"] = review.state.value
    row["attachments"] = _attachments_to_json(review.attachments)
    row["to_addrs"], row["cc_addrs"], row["bcc_addrs"] = list(review.to), list(review.cc), list(review.bcc)
    return row


async def add_review(conn: AsyncConnection, review: Review) -> None:
    await conn.execute(insert(reviews), _to_row(review))


_REVIEW = select(reviews).where(
    reviews.c.id == bindparam("review_id"), reviews.c.project_id == bindparam("project_id")
)
_REVIEW_FOR_UPDATE = _REVIEW.with_for_update()


async def get_review(
    conn: AsyncConnection, project_id: str, review_id: str, *, for_update: bool = False
) -> Review | None:
    """The review, if it belongs to ``project_id``; another tenant's review reads as absent."""
    query = _REVIEW_FOR_UPDATE if for_update else _REVIEW
    row = (await conn.execute(query, {"review_id": review_id, "project_id": project_id})).first()
    return _from_row(row) if row else None


async def get_review_any(conn: AsyncConnection, review_id: str) -> Review | None:
    """System use only (the reconciliation sweep): no tenant filter."""
    row = (await conn.execute(select(reviews).where(reviews.c.id == review_id))).first()
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


async def pending_in_scope(
    conn: AsyncConnection, *, org_id: str, project_id: str, category_id: str, agent_id: str
) -> list[Review]:
    """The drafts a rule change or a graduation may still affect, locked against concurrent closes
    so no nudge lands after a review's terminal one."""
    query = select(reviews).where(reviews.c.org_id == org_id, reviews.c.state.in_([s.value for s in PENDING]))
    if project_id:
        query = query.where(reviews.c.project_id == project_id)
    if category_id:
        query = query.where(reviews.c.category_id == category_id)
    if agent_id:
        query = query.where(reviews.c.agent_id == agent_id)
    rows = await conn.execute(query.order_by(reviews.c.id).with_for_update())
    return [_from_row(row) for row in rows]


async def compare_and_set(conn: AsyncConnection, current: Review, **changes: Any) -> Review | None:
    """Write ``changes`` only if the row is still at ``current.version``; the row count decides.

    Returns the new review, or None when another writer got there first.
    """
    updated = replace(current, version=current.version + 1, **changes)
    before = _to_row(current)
    # Only what changed: the version CAS already guarantees nobody else wrote the row since.
    values = {k: v for k, v in _to_row(updated).items() if v != before[k]}
    result = await conn.execute(
        update(reviews)
        .where(reviews.c.id == current.id, reviews.c.version == current.version)
        .values(**values)
    )
    return updated if result.rowcount == 1 else None


# --- turns --------------------------------------------------------------------------------------


async def add_turn(conn: AsyncConnection, turn: Turn) -> Turn:
    """Appends ``turn`` at the review's next seq (the caller holds the review row via its CAS)."""
    last = (
        await conn.execute(select(func.max(turns.c.seq)).where(turns.c.review_id == turn.review_id))
    ).scalar()
    turn = replace(turn, seq=(last or 0) + 1)
    await conn.execute(insert(turns), turn.__dict__)
    return turn


async def list_turns(conn: AsyncConnection, review_id: str) -> list[Turn]:
    rows = await conn.execute(select(turns).where(turns.c.review_id == review_id).order_by(turns.c.seq))
    return [Turn(**dict(r._mapping)) for r in rows]


_TURN_LABELS = {column.name: f"turn__{column.name}" for column in turns.c}
# Built once: the hot read path then skips statement construction and its cache-key walk per call.
_REVIEW_WITH_TURNS = (
    select(reviews, *(turns.c[name].label(label) for name, label in _TURN_LABELS.items()))
    .outerjoin(turns, turns.c.review_id == reviews.c.id)
    .where(reviews.c.id == bindparam("review_id"), reviews.c.project_id == bindparam("project_id"))
    .order_by(turns.c.seq)
)


async def get_review_with_turns(
    conn: AsyncConnection, project_id: str, review_id: str
) -> tuple[Review, list[Turn]] | None:
    """The review and its turns in one statement: one round trip and one snapshot for the hot read
    path. Another tenant's review reads as absent."""
    found = await conn.execute(_REVIEW_WITH_TURNS, {"review_id": review_id, "project_id": project_id})
    rows = found.all()
    if not rows:
        return None
    history = [
        Turn(**{name: row._mapping[label] for name, label in _TURN_LABELS.items()})
        for row in rows
        if row._mapping[_TURN_LABELS["id"]] is not None
    ]
    return _from_row(rows[0]), history


async def get_turn(conn: AsyncConnection, turn_id: str) -> Turn | None:
    row = (await conn.execute(select(turns).where(turns.c.id == turn_id))).first()
    return Turn(**dict(row._mapping)) if row else None


# --- messages and threads -------------------------------------------------------------------------


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


async def add_message(conn: AsyncConnection, message: Message) -> None:
    row = {
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
    }
    await conn.execute(insert(messages), row)


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


@dataclass(frozen=True)
class SendingFacts:
    """What decides whether mail may go to a set of recipients: their contact flags, the project's
    outbound count over the quota window and its stored review policy."""

    blocked: tuple[str, ...]
    suppressed: tuple[str, ...]
    first_contact: bool  # some recipient has never had mail from, nor written to, this project
    sent_since: int
    policy: str | None


_RECIPIENT_FLAGS = select(
    contacts.c.address, contacts.c.blocked, contacts.c.suppressed, contacts.c.contacted_at
).where(
    contacts.c.project_id == bindparam("project_id"),
    contacts.c.address.in_(bindparam("addresses", expanding=True)),
)
_PROJECT_SENDING = select(
    select(func.count())
    .select_from(messages)
    .where(
        messages.c.project_id == bindparam("project_id"),
        messages.c.direction == "outbound",
        messages.c.created_at >= bindparam("since"),
    )
    .scalar_subquery()
    .label("sent"),
    select(review_policies.c.policy)
    .where(review_policies.c.project_id == bindparam("project_id"))
    .scalar_subquery()
    .label("policy"),
)


async def sending_facts(
    conn: AsyncConnection, project_id: str, addresses: Sequence[str], since: datetime
) -> SendingFacts:
    """Two statements (built once) for every check of a send: submit, revision, reviewer release,
    delivery."""
    lowered = sorted({a.lower() for a in addresses})
    rows = (
        (await conn.execute(_RECIPIENT_FLAGS, {"project_id": project_id, "addresses": lowered})).all()
        if lowered
        else []
    )
    project = (await conn.execute(_PROJECT_SENDING, {"project_id": project_id, "since": since})).one()
    contacted = {r.address for r in rows if r.contacted_at is not None}
    return SendingFacts(
        blocked=tuple(r.address for r in rows if r.blocked),
        suppressed=tuple(r.address for r in rows if r.suppressed),
        first_contact=any(a not in contacted for a in lowered),
        sent_since=int(project.sent or 0),
        policy=project.policy,
    )


async def mark_contacted(
    conn: AsyncConnection, project_id: str, addresses: Sequence[str], now: datetime
) -> None:
    for address in sorted({a.lower() for a in addresses}):
        key = (contacts.c.project_id == project_id) & (contacts.c.address == address)
        updated = await conn.execute(
            update(contacts)
            .where(key, contacts.c.contacted_at.is_(None))
            .values(contacted_at=now, updated_at=now)
        )
        if updated.rowcount == 0:
            await conn.execute(
                insert_ignore(conn, contacts).values(
                    project_id=project_id,
                    address=address,
                    blocked=False,
                    suppressed=False,
                    contacted_at=now,
                    updated_at=now,
                )
            )


# --- the review policy and contacts ---------------------------------------------------------------


async def get_policy(conn: AsyncConnection, project_id: str) -> str | None:
    return (
        await conn.execute(select(review_policies.c.policy).where(review_policies.c.project_id == project_id))
    ).scalar()


async def set_policy(
    conn: AsyncConnection, org_id: str, project_id: str, policy: str, actor_id: str, now: datetime
) -> None:
    updated = await conn.execute(
        update(review_policies)
        .where(review_policies.c.project_id == project_id)
        .values(policy=policy, updated_by=actor_id, updated_at=now)
    )
    if updated.rowcount == 0:
        await conn.execute(
            insert(review_policies).values(
                project_id=project_id, org_id=org_id, policy=policy, updated_by=actor_id, updated_at=now
            )
        )


@dataclass(frozen=True)
class Contact:
    address: str
    blocked: bool
    suppressed: bool


async def block_contact(conn: AsyncConnection, project_id: str, address: str, now: datetime) -> Contact:
    """Put ``address`` on the project's block list: no mail goes to it, at submit or at delivery."""
    return await _flag(conn, project_id, address, contacts.c.blocked, now)


async def suppress_contact(conn: AsyncConnection, project_id: str, address: str, now: datetime) -> Contact:
    """Record that ``address`` unsubscribed from the project's mail."""
    return await _flag(conn, project_id, address, contacts.c.suppressed, now)


async def _flag(
    conn: AsyncConnection, project_id: str, address: str, flag: Column[bool], now: datetime
) -> Contact:
    address = address.lower()
    key = (contacts.c.project_id == project_id) & (contacts.c.address == address)
    updated = await conn.execute(update(contacts).where(key).values({flag: True, "updated_at": now}))
    if updated.rowcount == 0:
        await conn.execute(
            insert(contacts).values(
                project_id=project_id,
                address=address,
                blocked=flag is contacts.c.blocked,
                suppressed=flag is contacts.c.suppressed,
                updated_at=now,
            )
        )
    row = (await conn.execute(select(contacts).where(key))).one()
    return Contact(row.address, row.blocked, row.suppressed)


# --- delivery attempts ----------------------------------------------------------------------------


async def start_attempt(
    conn: AsyncConnection,
    review: Review,
    message_id: str,
    rfc_message_id: str,
    send_path: str,
    now: datetime,
) -> None:
    await conn.execute(
        insert(delivery_attempts).values(
            review_id=review.id,
            project_id=review.project_id,
            message_id=message_id,
            rfc_message_id=rfc_message_id,
            send_path=send_path,
            status="in_flight",
            started_at=now,
        )
    )


@dataclass(frozen=True)
class Attempt:
    """A review's one delivery attempt, and the ids it was sent under."""

    review_id: str
    message_id: str
    rfc_message_id: str
    send_path: str
    started_at: datetime


def _attempt(row: Any) -> Attempt:
    return Attempt(row.review_id, row.message_id, row.rfc_message_id, row.send_path, row.started_at)


async def get_attempt(conn: AsyncConnection, review_id: str) -> Attempt | None:
    row = (
        await conn.execute(select(delivery_attempts).where(delivery_attempts.c.review_id == review_id))
    ).first()
    return _attempt(row) if row else None


async def finish_attempt(
    conn: AsyncConnection, review_id: str, status: str, now: datetime, error: str | None = None
) -> bool:
    """Closes an in-flight attempt; False when someone (the sweep, a twin) already closed it."""
    result = await conn.execute(
        update(delivery_attempts)
        .where(delivery_attempts.c.review_id == review_id, delivery_attempts.c.status == "in_flight")
        .values(status=status, finished_at=now, error=error)
    )
    return bool(result.rowcount == 1)


async def parked_attempts(conn: AsyncConnection, started_before: datetime, limit: int = 100) -> list[Attempt]:
    """In-flight attempts older than a live send could take: their outcome is unknown."""
    rows = await conn.execute(
        select(delivery_attempts)
        .where(delivery_attempts.c.status == "in_flight", delivery_attempts.c.started_at < started_before)
        .order_by(delivery_attempts.c.started_at)
        .limit(limit)
    )
    return [_attempt(row) for row in rows]
