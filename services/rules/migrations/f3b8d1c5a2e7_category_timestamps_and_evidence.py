"""category authorship and updated_at, graduation evidence, author_kind narrowed to agent | human

A category records the agent that created it (unknown for older ones: empty) and when its record last
changed (backfilled with its creation); a graduation proposal keeps the agent's evidence. ``author_kind``
is the SDK's ``agent | human``: an admin's (and the platform's) writes read ``human``, a review agent's
``agent`` (a rule revision's ``changed_by_kind`` keeps the exact kind).

Revision ID: f3b8d1c5a2e7
Revises: e5c1a7b9d2f4
Create Date: 2026-12-03 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "f3b8d1c5a2e7"
down_revision: str | None = "e5c1a7b9d2f4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

AUTHOR_KINDS = {"admin": "human", "system": "human", "review_agent": "agent", "service": "agent"}


def upgrade() -> None:
    op.add_column(
        "categories",
        sa.Column("created_by_agent_id", sa.String(length=40), server_default="", nullable=False),
    )
    op.add_column("categories", sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE categories SET updated_at = created_at")
    with op.batch_alter_table("categories") as batch:
        batch.alter_column("updated_at", existing_type=sa.DateTime(timezone=True), nullable=False)
    op.add_column(
        "graduation_proposals",
        sa.Column("evidence", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")),
    )
    for table in ("rule_revisions", "categories"):
        for actor, author in AUTHOR_KINDS.items():
            op.execute(
                sa.text(f"UPDATE {table} SET author_kind = :author WHERE author_kind = :actor").bindparams(
                    author=author, actor=actor
                )
            )


def downgrade() -> None:
    with op.batch_alter_table("graduation_proposals") as batch:
        batch.drop_column("evidence")
    with op.batch_alter_table("categories") as batch:
        batch.drop_column("updated_at")
        batch.drop_column("created_by_agent_id")
