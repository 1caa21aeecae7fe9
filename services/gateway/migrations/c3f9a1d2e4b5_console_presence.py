"""console presence: who has a review open

Revision ID: c3f9a1d2e4b5
Revises: b7e41c2a9d10
Create Date: 2026-12-03 14:15:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c3f9a1d2e4b5"
down_revision: str | None = "b7e41c2a9d10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_presence",
        sa.Column("review_id", sa.String(length=40), nullable=False),
        sa.Column("session_id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("review_id", "session_id", name=op.f("pk_console_presence")),
    )
    op.create_index(op.f("ix_console_presence_project_id"), "console_presence", ["project_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_console_presence_project_id"), table_name="console_presence")
    op.drop_table("console_presence")
