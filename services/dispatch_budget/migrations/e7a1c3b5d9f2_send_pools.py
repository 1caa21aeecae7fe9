"""the shared-pool auto-send governor: send pool counters and receipts (issue 35)

Revision ID: e7a1c3b5d9f2
Revises: d9b3f1a7c2e5
Create Date: 2026-12-06 22:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e7a1c3b5d9f2"
down_revision: str | None = "d9b3f1a7c2e5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "send_pool_days",
        sa.Column("pool", sa.String(length=255), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("used", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("pool", "day", name=op.f("pk_send_pool_days")),
    )
    op.create_table(
        "send_pool_receipts",
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("review_id", sa.String(length=40), nullable=False),
        sa.Column("receipt_id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("pool", sa.String(length=255), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("project_id", "review_id", name=op.f("pk_send_pool_receipts")),
        sa.UniqueConstraint("receipt_id", name=op.f("uq_send_pool_receipts_receipt_id")),
    )
    with op.batch_alter_table("send_pool_receipts", schema=None) as batch_op:
        batch_op.create_index("ix_send_pool_receipts_pool_day", ["pool", "day"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("send_pool_receipts", schema=None) as batch_op:
        batch_op.drop_index("ix_send_pool_receipts_pool_day")
    op.drop_table("send_pool_receipts")
    op.drop_table("send_pool_days")
