"""the outbox's pending index holds the undelivered rows only

Revision ID: 00778089d3b7
Revises: b5d1c0a7e3f2
Create Date: 2026-12-06 10:00:00.000000
"""

from collections.abc import Sequence

from reviewloop.storage.outbox_migrations import index_every_row, index_only_undelivered

revision: str = "00778089d3b7"
down_revision: str | None = "b5d1c0a7e3f2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    index_only_undelivered()


def downgrade() -> None:
    index_every_row()
