"""The nudge store's tables: nudges, the un-acked frontier, one head row per review (tenant, last seq,
terminal reasons), the collapse keys, broadcasts and their acks, webhook endpoints, secrets and
deliveries. Heads and collapse keys are never compacted, so the terminal guarantee and the
``front_run_next`` collapse outlive the nudges they guard."""

from __future__ import annotations

from reviewloop.storage.schema import BigId, Json, UtcDateTime, new_metadata
from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = new_metadata()

# The PostgreSQL channel a committed nudge is announced on; its payload is the nudge's project_id.
NOTIFY_CHANNEL = "reviewloop_nudge"

nudges = Table(
    "nudges",
    metadata,
    # Arrival order: "oldest first" across reviews, and the keyset cursor. Ingests of one project
    # commit in pos order (see lock_projects), so a cursor never skips a later-committing row.
    Column("pos", BigId, primary_key=True, autoincrement=True),
    Column("id", String(40), nullable=False),
    Column("review_id", String(40), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("reason", String(40), nullable=False),
    Column("payload", Text, nullable=False),
    Column("category_id", String(40), nullable=False, server_default=""),
    Column("created_at", UtcDateTime, nullable=False),
    UniqueConstraint("review_id", "seq"),
    Index("ix_nudges_created_at", "created_at"),
)

# The un-acked frontier: one row per nudge not yet acked. An ack deletes rows here (nudges stay until
# compaction), so a drain reads and deletes a queue that holds only live work, whatever the backlog
# of acked nudges awaiting compaction.
unacked = Table(
    "unacked",
    metadata,
    Column("pos", BigId, primary_key=True, autoincrement=False),
    Column("review_id", String(40), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    UniqueConstraint("review_id", "seq"),
    Index("ix_unacked_project_agent_pos", "project_id", "agent_id", "pos"),
    Index("ix_unacked_project_pos", "project_id", "pos"),
)

review_heads = Table(
    "review_heads",
    metadata,
    Column("review_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("terminal_reasons", Json, nullable=False),
    Index("ix_review_heads_project_agent", "project_id", "agent_id"),
)

collapse_keys = Table(
    "collapse_keys",
    metadata,
    Column("collapse_key", String(200), primary_key=True),
    Column("review_id", String(40), nullable=False),
    Column("seq", BigInteger, nullable=False),
)

# --- broadcasts (issue 15) ----------------------------------------------------------------------------

# Project-wide nudges (``seq`` 0, no review): stored once, shown to every agent they name until that
# agent acks them (``broadcast_acks``). ``project_id`` "" reaches every project of the org, ``agent_id``
# "" every agent. ``pos`` orders them; appends take the org's lock (``lock_broadcasts``), so they commit
# in ``pos`` order and a cursor never skips a later-committing row.
broadcasts = Table(
    "broadcasts",
    metadata,
    Column("pos", BigId, primary_key=True, autoincrement=True),
    Column("id", String(40), nullable=False, unique=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    Column("reason", String(40), nullable=False),
    Column("category_id", String(40), nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_broadcasts_org_project_pos", "org_id", "project_id", "pos"),
    Index("ix_broadcasts_created_at", "created_at"),
)

# Who is done with which broadcast: one row per (broadcast, acking principal).
broadcast_acks = Table(
    "broadcast_acks",
    metadata,
    Column("broadcast_pos", BigId, primary_key=True, autoincrement=False),
    Column("actor_id", String(40), primary_key=True),
)

# --- webhooks (issue 19) ------------------------------------------------------------------------------

# An admin's endpoint of a project. ``lease_until`` is the delivery claim: one replica at a time sends to
# an endpoint, in order; a replica that dies holding it loses it when it expires.
webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("url", Text, nullable=False),
    Column("reasons", Json, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("lease_until", UtcDateTime),
    Index("ix_webhook_endpoints_project", "project_id"),
)

# The versions of an endpoint's signing secret: only the salt each is derived with (domain.webhooks).
# ``expires_at`` is null for the current one; a rotated-out one signs until its overlap ends.
webhook_secrets = Table(
    "webhook_secrets",
    metadata,
    Column("endpoint_id", String(40), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("salt", String(64), nullable=False),
    # Which webhook key the secret is derived with (domain.webhooks.key_id), so a changed key is noticed.
    Column("key_id", String(16), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime),
)

# The durable delivery queue: one row per (endpoint, nudge), written in the nudge's own transaction.
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("pos", BigId, primary_key=True, autoincrement=True),
    Column("endpoint_id", String(40), nullable=False),
    Column("event_id", String(40), nullable=False),
    Column("reason", String(40), nullable=False),
    Column("review_id", String(40), nullable=False),
    Column("body", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=False),
    Column("last_status", Integer),
    Column("last_error", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
    UniqueConstraint("endpoint_id", "event_id"),
    Index("ix_webhook_deliveries_due", "status", "endpoint_id", "pos"),
)
