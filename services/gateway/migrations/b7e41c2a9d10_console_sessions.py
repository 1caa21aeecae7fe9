"""console sessions

Revision ID: b7e41c2a9d10
Revises: e99f7aa7a026
Create Date: 2026-12-03 12:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b7e41c2a9d10"
down_revision: str | None = "e99f7aa7a026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("session_id", sa.String(length=40), nullable=False),
        sa.Column("write_hash", sa.String(length=64), nullable=False),
        sa.Column("read_hash", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_console_sessions")),
        sa.UniqueConstraint("read_hash", name=op.f("uq_console_sessions_read_hash")),
        sa.UniqueConstraint("write_hash", name=op.f("uq_console_sessions_write_hash")),
    )


def downgrade() -> None:
    op.drop_table("console_sessions")
