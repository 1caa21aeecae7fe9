"""the classifier endpoint is the deployment's (issue 35): stored project gate overrides lose classifier_url

Revision ID: d9b3f1a7c2e5
Revises: c4e8a2f6b1d9
Create Date: 2026-12-06 22:00:00

A project once could aim the deployment's classifier key at any URL. The service ignores a stored
``classifier_url`` already; this removes it from the rows, so no copy of the store keeps the setting
either. A project that had one falls back to the operator's default endpoint.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "d9b3f1a7c2e5"
down_revision: str | None = "c4e8a2f6b1d9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    configs = sa.table(
        "gate_configs",
        sa.column("project_id", sa.String),
        sa.column("config", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")),
    )
    bind = op.get_bind()
    for project_id, config in bind.execute(sa.select(configs.c.project_id, configs.c.config)).all():
        if isinstance(config, dict) and "classifier_url" in config:
            kept = {k: v for k, v in config.items() if k != "classifier_url"}
            bind.execute(configs.update().where(configs.c.project_id == project_id).values(config=kept))


def downgrade() -> None:
    pass  # a removed tenant URL is not restored
