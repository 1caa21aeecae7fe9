"""Tables every service store has: the transactional outbox and the inbox of delivered event ids."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

from google.protobuf.message import Message
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TextClause,
    TypeDecorator,
    bindparam,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncConnection

from reviewloop.ids import new_id
from reviewloop.storage import codec
from reviewloop.telemetry import current_traceparent

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# BIGINT autoincrement on PostgreSQL, INTEGER PRIMARY KEY (the rowid) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON().with_variant(postgresql.JSONB(), "postgresql")


def utcnow() -> datetime:
    """Now, as an aware UTC datetime."""
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime column on every backend.

    PostgreSQL keeps the zone; SQLite hands back naive values, which are UTC by construction here.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        """Store an aware value in UTC; a naive value is taken to be UTC already."""
        if value is None or value.tzinfo is None:  # naive values are UTC already
            return value
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        """Read a value back as an aware UTC datetime, whatever the backend returned."""
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def new_metadata() -> MetaData:
    """A service's MetaData, with the outbox and inbox tables already on it."""
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    Table(
        "outbox",
        metadata,
        Column("id", BigId, primary_key=True, autoincrement=True),
        Column("event_id", String(40), nullable=False, unique=True),
        Column("destination", String(40), nullable=False),
        Column("aggregate_id", String(64), nullable=False),
        Column("type", String(64), nullable=False),
        Column("payload", Text, nullable=False),
        Column("traceparent", String(64), nullable=False),
        Column("occurred_at", DateTime(timezone=True), nullable=False),
        Column("attempts", Integer, nullable=False, server_default="0"),
        Column("next_attempt_at", DateTime(timezone=True), nullable=False),
        Column("claimed_until", DateTime(timezone=True)),
        Column("delivered_at", DateTime(timezone=True)),
        # Set when the receiver refused the event for good (a dead letter; ``last_error`` says why).
        Column("dead_at", DateTime(timezone=True)),
        Column("last_error", Text),
        # The project the event concerns (its payload's ``project_id``), so a project's admin sees its
        # dead letters; null for events that name none.
        Column("project_id", String(64)),
        # A dead letter an admin gave up on, and why: kept (and pruned like a delivered row), never relayed.
        Column("discarded_at", DateTime(timezone=True)),
        Column("discard_reason", Text),
        # The relay's heads and the probe's backlog, among the undelivered rows only: a claim reads the
        # few rows still to send, not a week of delivered ones.
        Index(
            "ix_outbox_pending",
            "destination",
            "aggregate_id",
            "id",
            postgresql_where=text("delivered_at IS NULL"),
            sqlite_where=text("delivered_at IS NULL"),
        ),
        # Listing dead letters reads these few rows, not a week of delivered ones.
        Index("ix_outbox_dead", "dead_at"),
    )
    Table(
        "inbox",
        metadata,
        Column("event_id", String(40), primary_key=True),
        Column("received_at", DateTime(timezone=True), nullable=False),
    )
    return metadata


# The shared tables have the same shape in every store, so one Table object serves every statement.
_SHARED = new_metadata()
OUTBOX = _SHARED.tables["outbox"]
INBOX = _SHARED.tables["inbox"]


def project_of(payload: Message) -> str | None:
    """The project an event concerns: its ``project_id`` field, else its principal's; None if neither."""
    for holder in (payload, getattr(payload, "principal", None)):
        fields = holder.DESCRIPTOR.fields_by_name if isinstance(holder, Message) else {}
        if "project_id" in fields and (value := holder.project_id):  # type: ignore[union-attr]
            return str(value)
    return None


def outbox_row(destination: str, aggregate_id: str, type_: str, payload: Message) -> dict[str, Any]:
    """The outbox row of one event: ``payload`` is the event's typed message (see ``codec``)."""
    now = utcnow()
    return {
        "project_id": project_of(payload),
        "event_id": new_id("evt"),
        "destination": destination,
        "aggregate_id": aggregate_id,
        "type": type_,
        "payload": codec.encode(payload),
        "traceparent": current_traceparent(),
        "occurred_at": now,
        "attempts": 0,
        "next_attempt_at": now,
    }


async def insert_new(
    conn: AsyncConnection, table: Table, values: dict[str, Any] | list[dict[str, Any]]
) -> CursorResult[Any]:
    """``INSERT ... ON CONFLICT DO NOTHING`` of one row, or of rows with the same keys.

    Its row count (one row) is 1 when the row was new. Its statement is compiled once per table and
    columns: SQLAlchemy never caches a dialect's INSERT.
    """
    first = values if isinstance(values, dict) else values[0]
    return await conn.execute(_insert_new(table, tuple(first)), values)


@cache
def _insert_new(table: Table, columns: tuple[str, ...]) -> TextClause:
    # A text statement skips Python-side column defaults: a column that has one must be given.
    if missing := [c.name for c in table.c if c.default is not None and c.name not in columns]:
        raise ValueError(f"{table.name}: {missing} have Python-side defaults; give them")
    names = ", ".join(f'"{c}"' for c in columns)
    params = ", ".join(f":{c}" for c in columns)
    return text(f'INSERT INTO "{table.name}" ({names}) VALUES ({params}) ON CONFLICT DO NOTHING').bindparams(
        *(bindparam(c, type_=table.c[c].type) for c in columns)
    )


# SQLAlchemy never caches a dialect's INSERT: it would compile it again for every
# delivered event. The text is the same on PostgreSQL and SQLite, and is compiled once.
_FIRST_DELIVERY = text(
    "INSERT INTO inbox (event_id, received_at) VALUES (:event_id, :received_at) ON CONFLICT DO NOTHING"
).bindparams(bindparam("received_at", type_=INBOX.c.received_at.type))


async def first_delivery(conn: AsyncConnection, event_id: str) -> bool:
    """Record ``event_id`` as received; False when it was already received (a redelivery)."""
    result = await conn.execute(_FIRST_DELIVERY, {"event_id": event_id, "received_at": utcnow()})
    return bool(result.rowcount == 1)
