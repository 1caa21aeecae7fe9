"""durable delivery: the attempt's stage, tries, lease and parking

Revision ID: a7c41d2e9b10
Revises: b3c1a9d27e40
Create Date: 2026-12-03 12:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a7c41d2e9b10"
down_revision: str | None = "b3c1a9d27e40"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stage", sa.String(length=16), server_default="data", nullable=False))
        batch_op.add_column(sa.Column("tries", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("parked_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("resolution", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.drop_column("resolution")
        batch_op.drop_column("parked_at")
        batch_op.drop_column("lease_until")
        batch_op.drop_column("lease_owner")
        batch_op.drop_column("tries")
        batch_op.drop_column("stage")
