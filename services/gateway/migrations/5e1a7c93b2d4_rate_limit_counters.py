"""rate limit counters: the agent plane's fixed windows, shared by every gateway replica

Revision ID: 5e1a7c93b2d4
Revises: bd3eec7e1bea
Create Date: 2026-12-06 22:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5e1a7c93b2d4"
down_revision: str | None = "bd3eec7e1bea"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rate_limit_counters",
        sa.Column("limit_key", sa.String(length=255), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("limit_key", name=op.f("pk_rate_limit_counters")),
    )
    op.create_index(
        op.f("ix_rate_limit_counters_expires_at"), "rate_limit_counters", ["expires_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_rate_limit_counters_expires_at"), table_name="rate_limit_counters")
    op.drop_table("rate_limit_counters")
