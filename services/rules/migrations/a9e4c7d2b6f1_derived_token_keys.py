"""composition-token keys derived from the deployment secret (issue 35): a key row keeps a salt and the
deployment key's public name, never the key; legacy keys kept in plain get a retirement time

Revision ID: a9e4c7d2b6f1
Revises: 88d7574aa5c9
Create Date: 2026-12-06 22:10:00

The migration path of a legacy key: at the first boot after this revision the service derives a new
signing key; a legacy key then verifies only the tokens already out, for one token lifetime
(``retire_at``), signs nothing, and is wiped afterwards (``rules.store.retire_legacy_token_keys``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a9e4c7d2b6f1"
down_revision: str | None = "88d7574aa5c9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("token_keys", schema=None) as batch_op:
        batch_op.alter_column("secret", existing_type=sa.String(length=128), nullable=True)
        batch_op.add_column(sa.Column("salt", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("key_ref", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("retire_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # A derived key has no secret to keep; downgrading drops them (their tokens become invalid).
    op.execute(sa.text("DELETE FROM token_keys WHERE secret IS NULL"))
    with op.batch_alter_table("token_keys", schema=None) as batch_op:
        batch_op.drop_column("retire_at")
        batch_op.drop_column("key_ref")
        batch_op.drop_column("salt")
        batch_op.alter_column("secret", existing_type=sa.String(length=128), nullable=False)
