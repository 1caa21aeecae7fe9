"""authority, liveness and a faithful journal (issue 14)

Revision ID: a7c3e1f0b2d4
Revises: e33ecc107100
Create Date: 2026-12-03 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "a7c3e1f0b2d4"
down_revision: str | None = "e33ecc107100"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The admission owner; receipts admitted before it was kept stay null (the reviewer plane settles them).
    op.add_column("admissions", sa.Column("admitted_by", sa.String(length=120), nullable=True))
    # timeoutMinutes counts from in_flight_since; a review already in flight counts from when it is next seen.
    op.add_column("agent_sessions", sa.Column("in_flight_since", sa.DateTime(timezone=True), nullable=True))
    op.add_column("agent_sessions", sa.Column("in_flight_receipt", sa.String(length=40), nullable=True))
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
    op.drop_column("agent_sessions", "in_flight_receipt")
    op.drop_column("agent_sessions", "in_flight_since")
    op.drop_column("admissions", "admitted_by")
