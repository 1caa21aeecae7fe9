"""outbox dead letters: an event its receiver refused for good is set aside, not retried forever

Revision ID: 43bc50cd6b34
Revises: 600bec63abfd
Create Date: 2026-12-03 13:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "43bc50cd6b34"
down_revision: str | None = "600bec63abfd"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("dead_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("dead_at")
