"""the outbox's pending index holds the undelivered rows only

Revision ID: bd3eec7e1bea
Revises: 69590457a9c4
Create Date: 2026-12-06 10:00:00.000000
"""

from collections.abc import Sequence

from reviewloop.storage.outbox_migrations import index_every_row, index_only_undelivered

revision: str = "bd3eec7e1bea"
down_revision: str | None = "69590457a9c4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    index_only_undelivered()


def downgrade() -> None:
    index_every_row()
