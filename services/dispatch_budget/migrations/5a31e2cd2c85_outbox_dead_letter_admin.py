"""outbox dead letters for an admin: each row's project, and a discard with its reason

Revision ID: 5a31e2cd2c85
Revises: b8d2f4a6c1e3
Create Date: 2026-12-03 16:00:00.000000
"""

from collections.abc import Sequence

from reviewloop.storage.outbox_migrations import add_dead_letter_admin, drop_dead_letter_admin

revision: str = "5a31e2cd2c85"
down_revision: str | None = "b8d2f4a6c1e3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    add_dead_letter_admin()


def downgrade() -> None:
    drop_dead_letter_admin()
