"""the publication gate's evidence (issue 35): what each counted verdict rests on, the head its journal
named, the journal it was settled from, and its Diff scope table

Revision ID: c4e8a2f6b1d9
Revises: a81e06a40452
Create Date: 2026-12-06 21:30:00

Existing settlements keep a null ``evidence``: spec 003 says old records lacking proof remain historical
provenance, not current passing reviews, so the gate no longer counts them (settle again from the
attempt journal to count one).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "c4e8a2f6b1d9"
down_revision: str | None = "a81e06a40452"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("admissions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("evidence", sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column("reviewed_head", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("journal_run_id", sa.String(length=80), nullable=True))
        batch_op.add_column(
            sa.Column(
                "diff_scope",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("admissions", schema=None) as batch_op:
        batch_op.drop_column("diff_scope")
        batch_op.drop_column("journal_run_id")
        batch_op.drop_column("reviewed_head")
        batch_op.drop_column("evidence")
