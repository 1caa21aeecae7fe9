"""review deadline: when a review agent's time to decide a draft runs out (issue 19)

Revision ID: f4b8d2c61e07
Revises: 9bc1764697c9
Create Date: 2026-12-03 16:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f4b8d2c61e07"
down_revision: str | None = "9bc1764697c9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.add_column(sa.Column("review_deadline", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_reviews_state_review_deadline", ["state", "review_deadline"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.drop_index("ix_reviews_state_review_deadline")
        batch_op.drop_column("review_deadline")
