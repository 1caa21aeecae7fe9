"""The dispatch_budget schema: auto-send caps, runs and their admission scopes, receipts, settlements,
extensions, the runner catalog, review lineages, session counters, gate decisions and journals. Its
Alembic revisions are in ``dispatch_budget/migrations``."""

from __future__ import annotations

from reviewloop.storage.schema import BigId, Json, UtcDateTime, new_metadata
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = new_metadata()

# --- daily auto-send caps ---
auto_send_days = Table(
    "auto_send_days",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("category_id", String(40), primary_key=True),
    Column("day", Date, primary_key=True),
    Column("used", Integer, nullable=False),
)

# One row per review that spent a unit: a retry for the same review spends nothing more.
auto_send_spends = Table(
    "auto_send_spends",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("review_id", String(40), primary_key=True),
    Column("category_id", String(40), nullable=False),
    Column("day", Date, nullable=False),
    Column("spent_at", UtcDateTime(), nullable=False),
)

# --- the shared-pool auto-send governor: deployment-wide, across orgs ---
# One counter per sending pool (the From domain) per UTC day; ``used`` only moves by a conditional
# UPDATE whose row count decides (the compare-and-set), in the unit that writes or settles a receipt.
send_pool_days = Table(
    "send_pool_days",
    metadata,
    Column("pool", String(255), primary_key=True),
    Column("day", Date, primary_key=True),
    Column("used", Integer, nullable=False),
)

# One receipt per released review: a retry answers the same receipt and spends nothing more.
send_pool_receipts = Table(
    "send_pool_receipts",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("review_id", String(40), primary_key=True),
    Column("receipt_id", String(40), nullable=False, unique=True),
    Column("org_id", String(40), nullable=False),
    Column("pool", String(255), nullable=False),
    Column("day", Date, nullable=False),
    Column("status", String(12), nullable=False),
    Column("consumed_at", UtcDateTime(), nullable=False),
    Column("settled_at", UtcDateTime()),
    Index("ix_send_pool_receipts_pool_day", "pool", "day"),
)

# --- runs and round budgets (spec 003) ---
runs = Table(
    "runs",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("run_id", String(80), primary_key=True),
    Column("repository", String(200), nullable=False, server_default=""),
    Column("pr_number", BigInteger, nullable=False, server_default="0"),
    Column("head_sha", String(64), nullable=False, server_default=""),
    Column("status", String(20), nullable=False),
    Column("scope_key", String(300), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    # The run's rungs of resolveReviewMode (warm | cold), null when unset.
    Column("review_mode", String(8)),
    Column("pr_work_review_mode", String(8)),
    Column("repeat_review_context_mode", String(8)),
    # The run's reviewSequence rows (null: none; the project review configuration decides).
    Column("review_sequence", Json),
    # The principal that created the run (kind:id): a service key changes the status only of its own runs.
    # Null for runs created before owners were kept: only an admin changes those.
    Column("created_by", String(120)),
)

# The admission owner's row per scope: locked by every admission and grant, so they serialize.
round_scopes = Table(
    "round_scopes",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("scope_key", String(300), primary_key=True),
    Column("round_limit", Integer, nullable=False),
)

admissions = Table(
    "admissions",
    metadata,
    Column("receipt_id", String(40), primary_key=True),
    Column("project_id", String(40), nullable=False),
    Column("scope_key", String(300), nullable=False),
    Column("run_id", String(80), nullable=False),
    Column("attempt_key", String(200), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("trigger", String(30), nullable=False),
    Column("head_sha", String(64), nullable=False),
    Column("selection", Json, nullable=False),
    Column("admitted_at", UtcDateTime(), nullable=False),
    Column("round", Integer, nullable=False),
    # null while unsettled (which counts: fail closed); counted | no_verdict once settled.
    Column("outcome", String(20)),
    Column("reason", String(40)),
    Column("verdict", String(10)),
    Column("settled_at", UtcDateTime()),
    # The admission owner (actor kind:id), the only principal that may settle the receipt.
    Column("admitted_by", String(120)),
    # The reviewer session it ran in: qualifying reviews are counted per separate session.
    Column("review_session_id", String(40)),
    # What a counted verdict rests on (domain.qualifying): the journal's decoded evidence marker or
    # "reported"; null for settlements from before it was kept (never a passing review).
    Column("evidence", String(20)),
    Column("reviewed_head", String(64)),
    Column("journal_run_id", String(80)),
    # The verdict's Diff scope table (spec 003), or {"refused": why}.
    Column("diff_scope", Json),
    UniqueConstraint("project_id", "attempt_key"),
    Index("ix_admissions_scope", "project_id", "scope_key"),
)

extensions = Table(
    "extensions",
    metadata,
    Column("receipt_id", String(40), primary_key=True),
    Column("project_id", String(40), nullable=False),
    Column("idempotency_key", String(255), nullable=False),
    Column("request_hash", String(64), nullable=False),
    Column("scope_key", String(300), nullable=False),
    Column("receipt", Json, nullable=False),
    Column("granted_at", UtcDateTime(), nullable=False),
    UniqueConstraint("project_id", "idempotency_key"),
    Index("ix_extensions_scope", "project_id", "scope_key"),
)

# Automatic launches the no-verdict cap stopped (spec 003: "the gate records a launch refusal").
launch_refusals = Table(
    "launch_refusals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("project_id", String(40), nullable=False),
    Column("scope_key", String(300), nullable=False),
    Column("run_id", String(80), nullable=False),
    Column("attempt_key", String(200), nullable=False),
    Column("trigger", String(30), nullable=False),
    Column("no_verdict", Integer, nullable=False),
    Column("reason", Text, nullable=False),
    Column("refused_at", UtcDateTime(), nullable=False),
    Index("ix_launch_refusals_scope", "project_id", "scope_key", "id"),
)

# --- selection catalog and lineages ---
runners = Table(
    "runners",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("name", String(80), primary_key=True),
    Column("spec", Json, nullable=False),
)

# The project review configuration an admin stored (validated; its mode is the project default).
review_configs = Table(
    "review_configs",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("config", Json, nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
)

review_sessions = Table(
    "review_sessions",
    metadata,
    Column("session_id", String(40), primary_key=True),
    Column("project_id", String(40), nullable=False),
    Column("repository", String(200), nullable=False),
    Column("pr_number", BigInteger, nullable=False),
    Column("review_id", String(80), nullable=False),
    Column("runner", String(80), nullable=False),
    Column("model", String(80), nullable=False),
    Column("effort", String(40), nullable=False),
    Column("mode", String(10), nullable=False),
    Column("base_sha", String(64), nullable=False),
    Column("range_base", String(64), nullable=False),
    Column("range_head", String(64), nullable=False),
    Column("last_reviewed_head", String(64)),
    Column("busy", Boolean, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    # A busy binding's lease: its holder renews it; past lease_expires_at the reviewer is presumed crashed.
    Column("lease_id", String(40)),
    Column("lease_expires_at", UtcDateTime()),
    Index("ix_review_sessions_lineage", "project_id", "review_id"),
)

# --- the review-run gate (spec 001) ---
agent_sessions = Table(
    "agent_sessions",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("session_id", String(80), primary_key=True),
    Column("turns", Integer, nullable=False),
    Column("tools", Integer, nullable=False),
    Column("turn_index", Integer, nullable=False),
    Column("reviews", Integer, nullable=False),
    Column("in_flight", Boolean, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("last_review_at", UtcDateTime()),
    Column("last_gate_call_at", UtcDateTime()),
    # When the review in flight started (timeoutMinutes counts from it) and its admission receipt.
    Column("in_flight_since", UtcDateTime()),
    Column("in_flight_receipt", String(40)),
    # The timeout sweep reads the reviews in flight (in_flight_since is null otherwise).
    Index("ix_agent_sessions_in_flight_since", "in_flight_since"),
)

# An admin's gate configuration per project: overrides of the environment's defaults.
gate_configs = Table(
    "gate_configs",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("config", Json, nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
)

gate_decisions = Table(
    "gate_decisions",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("project_id", String(40), nullable=False),
    Column("session_id", String(80), nullable=False),
    Column("record", Json, nullable=False),
    Column("at", UtcDateTime(), nullable=False),
    Index("ix_gate_decisions_project", "project_id", "id"),
)

# --- attempt journals (spec 002) ---
journal_heads = Table(
    "journal_heads",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("run_id", String(80), primary_key=True),
    Column("last_offset", BigInteger, nullable=False),
)

journal_events = Table(
    "journal_events",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("run_id", String(80), primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("type", String(30), nullable=False),
    Column("record", Text, nullable=False),
    # True: ``record`` is the line its producer appended, byte for byte. Otherwise (null for records
    # journaled before lines were kept, false for a bare event the service composed into the envelope)
    # it is the service's canonical JSON of the record, and the read-back says it was re-encoded.
    Column("verbatim", Boolean),
)
