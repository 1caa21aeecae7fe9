"""rule snapshot: a draft that named no rule snapshot says so; a project may require a composition token (issue 34)

Revision ID: b8e2f61d4c93
Revises: 4fa8ff80e0dc
Create Date: 2026-12-06 21:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b8e2f61d4c93"
down_revision: str | None = "4fa8ff80e0dc"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("rule_snapshot_unnamed", sa.Boolean(), server_default="0", nullable=False)
        )
    op.create_table(
        "composition_settings",
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("require_composition_token", sa.Boolean(), nullable=False),
        sa.Column("updated_by", sa.String(length=40), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_composition_settings")),
    )


def downgrade() -> None:
    op.drop_table("composition_settings")
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.drop_column("rule_snapshot_unnamed")
