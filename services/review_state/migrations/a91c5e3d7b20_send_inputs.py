"""send inputs: the mode an agent asked for, and thread look-ups for replies and list filters

Revision ID: a91c5e3d7b20
Revises: d7e3a1b5c9f2
Create Date: 2026-12-03 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a91c5e3d7b20"
down_revision: str | None = "d7e3a1b5c9f2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reviews") as batch_op:
        batch_op.add_column(sa.Column("mode", sa.String(length=8), nullable=True))
    op.create_index("ix_reviews_project_id_thread_ref", "reviews", ["project_id", "thread_ref"])
    op.create_index("ix_messages_project_id_thread_ref", "messages", ["project_id", "thread_ref"])


def downgrade() -> None:
    op.drop_index("ix_messages_project_id_thread_ref", table_name="messages")
    op.drop_index("ix_reviews_project_id_thread_ref", table_name="reviews")
    with op.batch_alter_table("reviews") as batch_op:
        batch_op.drop_column("mode")
