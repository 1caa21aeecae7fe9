"""api key email: where a key's person is told of what is escalated to them (issue 38)

Revision ID: f1a2c3d4e5b6
Revises: 5e1a7c93b2d4
Create Date: 2026-12-07 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f1a2c3d4e5b6"
down_revision: str | None = "5e1a7c93b2d4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("email", sa.String(length=320), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("email")
