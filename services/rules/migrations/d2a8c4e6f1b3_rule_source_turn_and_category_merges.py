"""rule source turns and category merges: a rule names the review turn it was learnt from, and a
category merged into another records where it went

Revision ID: d2a8c4e6f1b3
Revises: 43bc50cd6b34
Create Date: 2026-12-03 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d2a8c4e6f1b3"
down_revision: str | None = "43bc50cd6b34"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "rule_revisions",
        sa.Column("source_turn_id", sa.String(length=40), server_default="", nullable=False),
    )
    op.add_column(
        "categories", sa.Column("merged_into", sa.String(length=40), server_default="", nullable=False)
    )


def downgrade() -> None:
    with op.batch_alter_table("categories") as batch:
        batch.drop_column("merged_into")
    with op.batch_alter_table("rule_revisions") as batch:
        batch.drop_column("source_turn_id")
