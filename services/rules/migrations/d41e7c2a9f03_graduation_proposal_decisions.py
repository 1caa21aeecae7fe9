"""graduation proposal decisions: a human approves or rejects a proposal (with the reason the agent reads)

Revision ID: d41e7c2a9f03
Revises: 94a1ecf0db1d
Create Date: 2026-12-03 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d41e7c2a9f03"
down_revision: str | None = "94a1ecf0db1d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("graduation_proposals") as batch:
        batch.add_column(sa.Column("status", sa.String(16), nullable=False, server_default="proposed"))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("decided_by", sa.String(40), nullable=True))
        batch.add_column(sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("graduation_proposals") as batch:
        batch.drop_column("decided_at")
        batch.drop_column("decided_by")
        batch.drop_column("reason")
        batch.drop_column("status")
