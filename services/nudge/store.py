"""The nudge store: nudges, and one head row per review (last seq, ack cursor, terminal reasons)."""

from __future__ import annotations

from reviewloop.storage.schema import BigId, Json, new_metadata
from sqlalchemy import BigInteger, Column, DateTime, Index, String, Table, Text, UniqueConstraint

metadata = new_metadata()

nudges = Table(
    "nudges",
    metadata,
    # Global arrival order: "oldest first" across reviews, and the keyset cursor.
    Column("pos", BigId, primary_key=True, autoincrement=True),
    Column("id", String(40), nullable=False, unique=True),
    Column("review_id", String(40), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("reason", String(40), nullable=False),
    Column("payload", Text, nullable=False),
    Column("category_id", String(40), nullable=False, server_default=""),
    Column("collapse_key", String(200)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("review_id", "seq"),
    UniqueConstraint("collapse_key"),
)

review_heads = Table(
    "review_heads",
    metadata,
    Column("review_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("acked_seq", BigInteger, nullable=False),
    Column("terminal_reasons", Json, nullable=False),
    Index("ix_review_heads_project_agent", "project_id", "agent_id"),
)
