"""undo window: a reviewer's release waits out its window on its delivery attempt (issue 38)

Revision ID: c7a2e4f19d35
Revises: e5c2a8f1d3b6
Create Date: 2026-12-07 00:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "c7a2e4f19d35"
down_revision: str | None = "e5c2a8f1d3b6"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("release_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("restore", _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.drop_column("restore")
        batch_op.drop_column("release_at")
