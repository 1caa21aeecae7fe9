"""recheck watermark: the highest nudge seq a review's agent said it re-checked the draft against (issue 15)

Revision ID: a3e9c7d1f5b2
Revises: a91c5e3d7b20
Create Date: 2026-12-03 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a3e9c7d1f5b2"
down_revision: str | None = "a91c5e3d7b20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("recheck_completed_through_seq", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.drop_column("recheck_completed_through_seq")
