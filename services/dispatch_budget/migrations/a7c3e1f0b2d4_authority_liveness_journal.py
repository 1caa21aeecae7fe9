"""authority, liveness and a faithful journal (issue 14)

Revision ID: a7c3e1f0b2d4
Revises: e33ecc107100
Create Date: 2026-12-03 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a7c3e1f0b2d4"
down_revision: str | None = "e33ecc107100"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The admission owner; receipts admitted before it was kept stay null (the reviewer plane settles them).
    op.add_column("admissions", sa.Column("admitted_by", sa.String(length=120), nullable=True))


def downgrade() -> None:
    op.drop_column("admissions", "admitted_by")
