"""pacing settings: a project's backlog pacing values (look-ahead window, rework batch max, interval)

Revision ID: b1d4f0a2c7e9
Revises: d41e7c2a9f03
Create Date: 2026-12-03 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "b1d4f0a2c7e9"
down_revision: str | None = "d41e7c2a9f03"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pacing_settings",
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column(
            "settings",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_pacing_settings")),
    )


def downgrade() -> None:
    op.drop_table("pacing_settings")
