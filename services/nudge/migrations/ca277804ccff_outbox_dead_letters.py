"""outbox dead letters: an event its receiver refused for good is set aside, not retried forever

Revision ID: ca277804ccff
Revises: f05a2e2642e2
Create Date: 2026-12-03 13:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "ca277804ccff"
down_revision: str | None = "f05a2e2642e2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("dead_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("dead_at")
