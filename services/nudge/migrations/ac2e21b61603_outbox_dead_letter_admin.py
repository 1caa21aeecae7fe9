"""outbox dead letters for an admin: each row's project, and a discard with its reason

Revision ID: ac2e21b61603
Revises: 3a4e9b1c416d
Create Date: 2026-12-03 16:00:00.000000
"""

from collections.abc import Sequence

from reviewloop.storage.outbox_migrations import add_dead_letter_admin, drop_dead_letter_admin

revision: str = "ac2e21b61603"
down_revision: str | None = "3a4e9b1c416d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    add_dead_letter_admin()


def downgrade() -> None:
    drop_dead_letter_admin()
