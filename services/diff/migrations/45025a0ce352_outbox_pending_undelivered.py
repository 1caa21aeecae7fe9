"""the outbox's pending index holds the undelivered rows only

Revision ID: 45025a0ce352
Revises: 65827adb79b0
Create Date: 2026-12-06 10:00:00.000000
"""

from collections.abc import Sequence

from reviewloop.storage.outbox_migrations import index_every_row, index_only_undelivered

revision: str = "45025a0ce352"
down_revision: str | None = "65827adb79b0"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    index_only_undelivered()


def downgrade() -> None:
    index_every_row()
