"""category merge audit: one row per merge (who, when, from, into, why, rules moved and retired)

Revision ID: e5c1a7b9d2f4
Revises: b1d4f0a2c7e9
Create Date: 2026-12-03 17:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e5c1a7b9d2f4"
down_revision: str | None = "b1d4f0a2c7e9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "category_merges",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("category_id", sa.String(length=40), nullable=False),
        sa.Column("into_category_id", sa.String(length=40), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("actor_kind", sa.String(length=16), nullable=False),
        sa.Column("actor_id", sa.String(length=40), nullable=False),
        sa.Column("rules_moved", sa.Integer(), nullable=False),
        sa.Column("rules_retired", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_category_merges")),
    )
    op.create_index("ix_category_merges_category_id", "category_merges", ["category_id"])
    op.create_index("ix_category_merges_into_category_id", "category_merges", ["into_category_id"])


def downgrade() -> None:
    op.drop_index("ix_category_merges_into_category_id", table_name="category_merges")
    op.drop_index("ix_category_merges_category_id", table_name="category_merges")
    op.drop_table("category_merges")
