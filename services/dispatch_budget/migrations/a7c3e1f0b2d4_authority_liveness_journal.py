"""authority, liveness and the ready gate (issue 14)

Revision ID: a7c3e1f0b2d4
Revises: f6d069f96f82
Create Date: 2026-12-03 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "a7c3e1f0b2d4"
down_revision: str | None = "f6d069f96f82"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The admission owner (null for receipts admitted before: the reviewer plane settles those) and the
    # reviewer session an attempt ran in.
    with op.batch_alter_table("admissions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("admitted_by", sa.String(length=120), nullable=True))
        batch_op.add_column(sa.Column("review_session_id", sa.String(length=40), nullable=True))
    # The run's reviewSequence (run create).
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "review_sequence",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )
    # timeoutMinutes counts from in_flight_since; a review already in flight counts from when it is next seen.
    with op.batch_alter_table("agent_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("in_flight_since", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("in_flight_receipt", sa.String(length=40), nullable=True))
    # A busy binding's lease; a busy row from before leases holds none (its lineage is available again).
    with op.batch_alter_table("review_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_id", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "gate_configs",
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_gate_configs")),
    )


def downgrade() -> None:
    op.drop_table("gate_configs")
    with op.batch_alter_table("review_sessions", schema=None) as batch_op:
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("lease_id")
    with op.batch_alter_table("agent_sessions", schema=None) as batch_op:
        batch_op.drop_column("in_flight_receipt")
        batch_op.drop_column("in_flight_since")
    with op.batch_alter_table("admissions", schema=None) as batch_op:
        batch_op.drop_column("review_session_id")
        batch_op.drop_column("admitted_by")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("review_sequence")
