"""liveness follow-ups (issue 14): legacy busy bindings and reviews in flight get a start, runs an owner

Revision ID: b8d2f4a6c1e3
Revises: a7c3e1f0b2d4
Create Date: 2026-12-03 14:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "b8d2f4a6c1e3"
down_revision: str | None = "a7c3e1f0b2d4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# dispatch_budget.domain.lineage.DEFAULT_LEASE when this revision was written (a migration keeps its values).
DEFAULT_LEASE = timedelta(seconds=120)


def upgrade() -> None:
    now = datetime.now(UTC)
    # A busy binding from before leases may still have its reviewer running: spec 003 wants a busy
    # binding refused or waited for, never taken over, so it holds a default lease from now (its
    # reviewer cannot renew a lease it never got, so a crashed one frees the lineage after that).
    sessions = sa.table(
        "review_sessions",
        sa.column("busy", sa.Boolean),
        sa.column("lease_expires_at", sa.DateTime(timezone=True)),
    )
    op.execute(
        sessions.update()
        .where(sessions.c.busy.is_(True), sessions.c.lease_expires_at.is_(None))
        .values(lease_expires_at=now + DEFAULT_LEASE)
    )
    # Likewise a review in flight from before its start was kept: timeoutMinutes counts from now, so
    # the background sweep (which reads in_flight_since) ends it too.
    agents = sa.table(
        "agent_sessions",
        sa.column("in_flight", sa.Boolean),
        sa.column("in_flight_since", sa.DateTime(timezone=True)),
    )
    op.execute(
        agents.update()
        .where(agents.c.in_flight.is_(True), agents.c.in_flight_since.is_(None))
        .values(in_flight_since=now)
    )
    with op.batch_alter_table("agent_sessions", schema=None) as batch_op:
        batch_op.create_index("ix_agent_sessions_in_flight_since", ["in_flight_since"], unique=False)
    # The run's owner: the principal that created it (null for runs from before: admin only).
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("created_by", sa.String(length=120), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("created_by")
    with op.batch_alter_table("agent_sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_agent_sessions_in_flight_since")
