"""the outbox's pending index holds the undelivered rows only

Revision ID: 88d7574aa5c9
Revises: f3b8d1c5a2e7
Create Date: 2026-12-06 10:00:00.000000
"""

from collections.abc import Sequence

from reviewloop.storage.outbox_migrations import index_every_row, index_only_undelivered

revision: str = "88d7574aa5c9"
down_revision: str | None = "f3b8d1c5a2e7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    index_only_undelivered()


def downgrade() -> None:
    index_every_row()
