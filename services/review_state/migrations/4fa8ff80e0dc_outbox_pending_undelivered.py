"""the outbox's pending index holds the undelivered rows only

Revision ID: 4fa8ff80e0dc
Revises: a3e9c7d1f5b2
Create Date: 2026-12-06 10:00:00.000000
"""

from collections.abc import Sequence

from reviewloop.storage.outbox_migrations import index_every_row, index_only_undelivered

revision: str = "4fa8ff80e0dc"
down_revision: str | None = "a3e9c7d1f5b2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    index_only_undelivered()


def downgrade() -> None:
    index_every_row()
