"""the outbox's pending index holds the undelivered rows only

Revision ID: a81e06a40452
Revises: 5a31e2cd2c85
Create Date: 2026-12-06 10:00:00.000000
"""

from collections.abc import Sequence

from reviewloop.storage.outbox_migrations import index_every_row, index_only_undelivered

revision: str = "a81e06a40452"
down_revision: str | None = "5a31e2cd2c85"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    index_only_undelivered()


def downgrade() -> None:
    index_every_row()
