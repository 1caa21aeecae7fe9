"""Alembic steps every store's outbox takes alike, called from each service's own migration.

Each service keeps its own revision chain (its store is its own), but the outbox table is the shared
library's: its changes are written once here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def add_dead_letter_admin() -> None:
    """Each row's project, and a discard with its reason (dead letters an admin lists, retries or discards).

    Rows written before keep no project: only the deployment operator (`reviewloop outbox`) sees them.
    """
    op.add_column("outbox", sa.Column("project_id", sa.String(length=64), nullable=True))
    op.add_column("outbox", sa.Column("discarded_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("outbox", sa.Column("discard_reason", sa.Text(), nullable=True))
    op.create_index("ix_outbox_dead", "outbox", ["dead_at"])


def drop_dead_letter_admin() -> None:
    """Undo :func:`add_dead_letter_admin`."""
    op.drop_index("ix_outbox_dead", table_name="outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("discard_reason")
        batch.drop_column("discarded_at")
        batch.drop_column("project_id")


def index_only_undelivered() -> None:
    """``ix_outbox_pending`` holds the undelivered rows only (``WHERE delivered_at IS NULL``).

    Over every row it could not find the relay's heads: PostgreSQL read the whole table on each claim
    (9 ms at 60,000 rows, which a week of retention reaches quickly), and the outbox probe did too.
    """
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_pending")
        batch_op.create_index(
            "ix_outbox_pending",
            ["destination", "aggregate_id", "id"],
            unique=False,
            postgresql_where=sa.text("delivered_at IS NULL"),
            sqlite_where=sa.text("delivered_at IS NULL"),
        )


def index_every_row() -> None:
    """Undo :func:`index_only_undelivered`."""
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_pending")
        batch_op.create_index("ix_outbox_pending", ["destination", "aggregate_id", "id"], unique=False)


def create_outbox() -> None:
    """The outbox as every store's first revision created it."""
    op.create_table(
        "outbox",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("event_id", sa.String(length=40), nullable=False),
        sa.Column("destination", sa.String(length=40), nullable=False),
        sa.Column("aggregate_id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("traceparent", sa.String(length=64), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("event_id", name=op.f("uq_outbox_event_id")),
    )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index("ix_outbox_pending", ["destination", "aggregate_id", "id"], unique=False)


def drop_outbox() -> None:
    """Undo :func:`create_outbox`."""
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_pending")
    op.drop_table("outbox")
