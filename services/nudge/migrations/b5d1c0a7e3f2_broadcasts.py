"""broadcasts: project-wide nudges and who acked them

Revision ID: b5d1c0a7e3f2
Revises: ac2e21b61603
Create Date: 2026-12-03 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b5d1c0a7e3f2"
down_revision: str | None = "ac2e21b61603"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "broadcasts",
        sa.Column(
            "pos", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("agent_id", sa.String(length=40), nullable=False),
        sa.Column("reason", sa.String(length=40), nullable=False),
        sa.Column("category_id", sa.String(length=40), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("pos", name=op.f("pk_broadcasts")),
        sa.UniqueConstraint("id", name=op.f("uq_broadcasts_id")),
    )
    op.create_index("ix_broadcasts_created_at", "broadcasts", ["created_at"], unique=False)
    op.create_index(
        "ix_broadcasts_org_project_pos", "broadcasts", ["org_id", "project_id", "pos"], unique=False
    )
    op.create_table(
        "broadcast_acks",
        sa.Column(
            "broadcast_pos",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column("actor_id", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("broadcast_pos", "actor_id", name=op.f("pk_broadcast_acks")),
    )


def downgrade() -> None:
    op.drop_table("broadcast_acks")
    op.drop_index("ix_broadcasts_org_project_pos", table_name="broadcasts")
    op.drop_index("ix_broadcasts_created_at", table_name="broadcasts")
    op.drop_table("broadcasts")
