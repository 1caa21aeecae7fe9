"""contact list provenance: since when and by whom a recipient is blocked or suppressed (the console lists them)

Revision ID: f3b9d0c4e7a1
Revises: f4b8d2c61e07
Create Date: 2026-12-03 16:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f3b9d0c4e7a1"
down_revision: str | None = "f4b8d2c61e07"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("contacts") as batch:
        batch.add_column(sa.Column("blocked_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("blocked_by", sa.String(40), nullable=True))
        batch.add_column(sa.Column("suppressed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("suppressed_by", sa.String(40), nullable=True))
    # Flags set before this revision: since their row's last change, by nobody known.
    op.execute("UPDATE contacts SET blocked_at = updated_at WHERE blocked")
    op.execute("UPDATE contacts SET suppressed_at = updated_at WHERE suppressed")


def downgrade() -> None:
    with op.batch_alter_table("contacts") as batch:
        batch.drop_column("suppressed_by")
        batch.drop_column("suppressed_at")
        batch.drop_column("blocked_by")
        batch.drop_column("blocked_at")
