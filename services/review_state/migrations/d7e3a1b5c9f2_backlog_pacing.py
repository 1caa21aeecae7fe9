"""backlog pacing: stale drafts held from release, and each category's pacing window

Revision ID: d7e3a1b5c9f2
Revises: f3b9d0c4e7a1
Create Date: 2026-12-03 16:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "d7e3a1b5c9f2"
down_revision: str | None = "f3b9d0c4e7a1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stale_drafts",
        sa.Column("review_id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("category_id", sa.String(length=40), nullable=False),
        sa.Column("required_high_water", sa.BigInteger(), nullable=False),
        sa.Column(
            "rule",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("propagate", sa.Boolean(), nullable=False),
        sa.Column("suggested_batch", sa.Integer(), nullable=False),
        sa.Column("nudged_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("review_id", name=op.f("pk_stale_drafts")),
    )
    op.create_index(
        "ix_stale_drafts_project_id_category_id_review_id",
        "stale_drafts",
        ["project_id", "category_id", "review_id"],
    )
    op.create_table(
        "pacing_windows",
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("category_id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("lookahead_window", sa.Integer(), nullable=False),
        sa.Column("rework_batch_max", sa.Integer(), nullable=False),
        sa.Column("nudge_min_interval_ms", sa.Integer(), nullable=False),
        sa.Column("last_nudged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cursor_review_id", sa.String(length=40), server_default="", nullable=False),
        sa.Column("cursor_advanced_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("project_id", "category_id", name=op.f("pk_pacing_windows")),
    )


def downgrade() -> None:
    op.drop_table("pacing_windows")
    op.drop_index("ix_stale_drafts_project_id_category_id_review_id", table_name="stale_drafts")
    op.drop_table("stale_drafts")
