"""account review policies: the org default a project without its own override resolves to

Revision ID: b3c1a9d27e40
Revises: e92a7250b407
Create Date: 2026-12-03 13:15:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b3c1a9d27e40"
down_revision: str | None = "e92a7250b407"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "account_review_policies",
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("updated_by", sa.String(length=40), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("org_id", name=op.f("pk_account_review_policies")),
    )


def downgrade() -> None:
    op.drop_table("account_review_policies")
