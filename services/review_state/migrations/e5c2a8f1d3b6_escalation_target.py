"""escalation target: whom a reviewer escalated a draft to, by whom, when, and by when (issue 38)

Revision ID: e5c2a8f1d3b6
Revises: b8e2f61d4c93
Create Date: 2026-12-07 00:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e5c2a8f1d3b6"
down_revision: str | None = "b8e2f61d4c93"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.add_column(sa.Column("escalated_to", sa.String(length=48), nullable=True))
        batch_op.add_column(sa.Column("escalated_to_name", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("escalated_by", sa.String(length=48), nullable=True))
        batch_op.add_column(sa.Column("escalated_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("escalation_deadline", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(
            "ix_reviews_project_id_escalated_to", ["project_id", "escalated_to"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.drop_index("ix_reviews_project_id_escalated_to")
        batch_op.drop_column("escalation_deadline")
        batch_op.drop_column("escalated_at")
        batch_op.drop_column("escalated_by")
        batch_op.drop_column("escalated_to_name")
        batch_op.drop_column("escalated_to")
