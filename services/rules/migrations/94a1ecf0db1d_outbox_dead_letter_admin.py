"""outbox dead letters for an admin: each row's project, and a discard with its reason

Revision ID: 94a1ecf0db1d
Revises: d2a8c4e6f1b3
Create Date: 2026-12-03 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "94a1ecf0db1d"
down_revision: str | None = "d2a8c4e6f1b3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Rows written before keep no project: only the deployment operator (`reviewloop outbox`) sees them.
    op.add_column("outbox", sa.Column("project_id", sa.String(length=64), nullable=True))
    op.add_column("outbox", sa.Column("discarded_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("outbox", sa.Column("discard_reason", sa.Text(), nullable=True))
    op.create_index("ix_outbox_dead", "outbox", ["dead_at"])


def downgrade() -> None:
    op.drop_index("ix_outbox_dead", table_name="outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("discard_reason")
        batch.drop_column("discarded_at")
        batch.drop_column("project_id")
