"""journal lines kept verbatim (issue 35): whether a journal record's stored line is the line its
producer appended, byte for byte

Revision ID: b3f5d7e9a1c2
Revises: e7a1c3b5d9f2
Create Date: 2026-12-07 01:10:00

Records journaled before this keep a null ``verbatim``: their line is the service's canonical JSON of the
record (keys sorted), and the read-back names them as re-encoded.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b3f5d7e9a1c2"
down_revision: str | None = "e7a1c3b5d9f2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("journal_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("verbatim", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("journal_events", schema=None) as batch_op:
        batch_op.drop_column("verbatim")
