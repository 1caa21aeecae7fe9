"""review revisions: each revision's content, so any two revisions can be compared

Revision ID: c5d8e1f2a3b4
Revises: a7c41d2e9b10
Create Date: 2026-12-03 14:30:00.000000

Existing reviews get their current revision backfilled (earlier ones were never kept).
"""

import base64
import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "c5d8e1f2a3b4"
down_revision: str | None = "a7c41d2e9b10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    revisions = op.create_table(
        "review_revisions",
        sa.Column("review_id", sa.String(length=40), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("to_addrs", _JSON, nullable=False),
        sa.Column("cc_addrs", _JSON, nullable=False),
        sa.Column("bcc_addrs", _JSON, nullable=False),
        sa.Column("body_text", sa.Text(), nullable=False),
        sa.Column("body_html", sa.Text(), nullable=True),
        sa.Column("attachments", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("review_id", "revision", name=op.f("pk_review_revisions")),
    )
    reviews = sa.table(
        "reviews",
        *(sa.column(n) for n in ("id", "revision", "project_id", "subject", "body_text", "body_html")),
        *(sa.column(n, _JSON) for n in ("to_addrs", "cc_addrs", "bcc_addrs", "attachments")),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )
    bind = op.get_bind()
    rows = [
        {
            "review_id": r.id,
            "revision": r.revision,
            "project_id": r.project_id,
            "subject": r.subject,
            "to_addrs": r.to_addrs,
            "cc_addrs": r.cc_addrs,
            "bcc_addrs": r.bcc_addrs,
            "body_text": r.body_text,
            "body_html": r.body_html,
            "attachments": [_facts(a) for a in r.attachments or []],
            "created_at": r.updated_at,
        }
        for r in bind.execute(sa.select(reviews))
    ]
    if rows:
        op.bulk_insert(revisions, rows)


def _facts(attachment: dict[str, str]) -> dict[str, object]:
    content = base64.b64decode(attachment["content_base64"])
    return {
        "filename": attachment["filename"],
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }


def downgrade() -> None:
    op.drop_table("review_revisions")
