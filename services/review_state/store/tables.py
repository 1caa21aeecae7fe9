"""The review_state schema: its tables, on the metadata the migrations are checked against."""

from __future__ import annotations

from reviewloop.storage.idempotency import idempotency_table
from reviewloop.storage.schema import Json, UtcDateTime, new_metadata
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

metadata = new_metadata()

reviews = Table(
    "reviews",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    Column("category_id", String(40), nullable=False, server_default=""),
    Column("kind", String(16), nullable=False),
    Column("state", String(24), nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("to_addrs", Json, nullable=False),
    Column("cc_addrs", Json, nullable=False),
    Column("bcc_addrs", Json, nullable=False),
    Column("subject", Text, nullable=False),
    Column("body_text", Text, nullable=False),
    Column("body_html", Text),
    Column("reply_to", String(320)),
    Column("headers", Json, nullable=False),
    Column("attachments", Json, nullable=False),
    Column("from_address", String(320), nullable=False),
    Column("intent", Json),
    Column("confidence", Float),
    Column("rule_high_water", BigInteger, nullable=False, server_default="0"),
    # The draft named no rule snapshot (a send without a composition_token, a redraft naming neither a token
    # nor rules_version_seen): rule_high_water is then the stack's at that moment, not rules it read.
    Column("rule_snapshot_unnamed", Boolean, nullable=False, server_default="0"),
    # The highest nudge seq the agent said it re-checked the draft against (restamp_review); never lowered.
    Column("recheck_completed_through_seq", BigInteger, nullable=False, server_default="0"),
    Column("parent_message_id", String(40)),
    Column("in_reply_to", Text),
    Column("references_hdr", Text),
    Column("message_id", String(40)),
    Column("rfc_message_id", String(255)),
    Column("thread_ref", String(40)),
    Column("send_path", String(24)),
    Column("send_error", Text),
    Column("gate_outcome", String(64)),
    Column("reviewer_hops", Integer, nullable=False, server_default="0"),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("decided_at", UtcDateTime),
    Column("sent_at", UtcDateTime),
    # When a review agent's time to decide runs out (the category's review_deadline_minutes at submit).
    Column("review_deadline", UtcDateTime),
    # The mode the agent asked for (review | direct); NULL when it asked for none.
    Column("mode", String(8)),
    # An escalation (domain.escalation): its target (a key id or role:<role>), the target's name, who
    # escalated, when, and the deadline; escalated_at NULL: not escalated.
    Column("escalated_to", String(48)),
    Column("escalated_to_name", String(200)),
    Column("escalated_by", String(48)),
    Column("escalated_at", UtcDateTime),
    Column("escalation_deadline", UtcDateTime),
    Index("ix_reviews_project_id_id", "project_id", "id"),
    Index("ix_reviews_project_id_escalated_to", "project_id", "escalated_to"),
    Index("ix_reviews_state_review_deadline", "state", "review_deadline"),
    Index("ix_reviews_org_id_state", "org_id", "state"),
    Index("ix_reviews_project_id_thread_ref", "project_id", "thread_ref"),
)

turns = Table(
    "turns",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("review_id", String(40), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("turn_type", String(24), nullable=False),
    Column("actor_kind", String(16), nullable=False),
    Column("actor_id", String(40), nullable=False),
    Column("body", Text, nullable=False, server_default=""),
    Column("revision", BigInteger, nullable=False),
    Column("action", String(16), nullable=False, server_default=""),
    Column("changed", Boolean, nullable=False, server_default="0"),
    Column("diff_json", Json),
    Column("diff_unified", Text),
    Column("rule_ids", Json, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_turns_review_id_seq", "review_id", "seq", unique=True),
)

# One row per revision of a review: its content as the composer (or an editing human) left it,
# written in the unit of work that creates the revision. Attachments keep name, size and sha256 only.
review_revisions = Table(
    "review_revisions",
    metadata,
    Column("review_id", String(40), nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("subject", Text, nullable=False),
    Column("to_addrs", Json, nullable=False),
    Column("cc_addrs", Json, nullable=False),
    Column("bcc_addrs", Json, nullable=False),
    Column("body_text", Text, nullable=False),
    Column("body_html", Text),
    Column("attachments", Json, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("review_id", "revision"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("direction", String(8), nullable=False),  # inbound | outbound
    Column("rfc_message_id", String(255), nullable=False),
    Column("references_hdr", Text, nullable=False, server_default=""),
    Column("thread_ref", String(40), nullable=False),
    Column("from_address", String(320), nullable=False),
    Column("to_addrs", Json, nullable=False),
    Column("cc_addrs", Json, nullable=False),
    Column("subject", Text, nullable=False),
    Column("body_text", Text, nullable=False),
    Column("headers", Json, nullable=False),
    Column("review_id", String(40)),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_messages_project_id_rfc_message_id", "project_id", "rfc_message_id"),
    Index("ix_messages_project_id_direction_created_at", "project_id", "direction", "created_at"),
    Index("ix_messages_project_id_thread_ref", "project_id", "thread_ref"),
)

# A project's composition settings (the console's): require_composition_token refuses a send, reply or
# forward that names no rule snapshot.
composition_settings = Table(
    "composition_settings",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("require_composition_token", Boolean, nullable=False),
    Column("updated_by", String(40), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

review_policies = Table(
    "review_policies",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("policy", String(32), nullable=False),
    Column("updated_by", String(40), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

# The account (org) default policy: a project without its own override resolves to it.
account_review_policies = Table(
    "account_review_policies",
    metadata,
    Column("org_id", String(40), primary_key=True),
    Column("policy", String(32), nullable=False),
    Column("updated_by", String(40), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

contacts = Table(
    "contacts",
    metadata,
    Column("project_id", String(40), nullable=False),
    Column("address", String(320), nullable=False),
    Column("blocked", Boolean, nullable=False, server_default="0"),
    Column("suppressed", Boolean, nullable=False, server_default="0"),
    # Since when and by whom (an admin's actor id) each flag is set; null while it is not.
    Column("blocked_at", UtcDateTime),
    Column("blocked_by", String(40)),
    Column("suppressed_at", UtcDateTime),
    Column("suppressed_by", String(40)),
    # Set once mail went to or came from the address: it is no longer a first contact.
    Column("contacted_at", UtcDateTime),
    Column("updated_at", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("project_id", "address"),
)

# One delivery per review, written by the approval's own transaction: the durable step a worker on any
# replica claims. One Message-ID for its whole life, so a send that may have gone out is never repeated.
delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("review_id", String(40), primary_key=True),
    Column("project_id", String(40), nullable=False),
    Column("message_id", String(40), nullable=False),
    Column("rfc_message_id", String(255), nullable=False),
    Column("send_path", String(24), nullable=False),
    Column("status", String(16), nullable=False),  # in_flight | delivered | refused
    # While in_flight: queued (no try reached DATA: safe to send) | data (a try passed it: its outcome
    # is known only by evidence) | parked (send_needs_reconciliation: evidence or an operator decides).
    # A row from before the column is treated as past DATA.
    Column("stage", String(16), nullable=False, server_default="data"),
    Column("tries", Integer, nullable=False, server_default="0"),
    # The worker holding the row and until when; a queued row's lease is also its next retry time.
    Column("lease_owner", String(40)),
    Column("lease_until", UtcDateTime),
    Column("parked_at", UtcDateTime),
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
    # The refusal (refused), or the last try's transient error (in_flight).
    Column("error", Text),
    # Who closed a parked attempt by hand, and why ("<actor>: <reason>").
    Column("resolution", Text),
    # A reviewer's release waiting out its undo window (issue 38): when it goes to delivery (its first
    # claim is due then: the queued row's lease_until starts equal), and what its decision found, which
    # an undo before then writes back (``domain.undo.snapshot``). NULL: released at once.
    Column("release_at", UtcDateTime),
    Column("restore", Json),
    Index("ix_delivery_attempts_status_started_at", "status", "started_at"),
)

# Backlog reconciliation (spec 000 "backlog reconciliation + pacing"): one row per pending draft a rule
# change left stale (composed under an older rule high-water than its scope now has), until a redraft or
# restamp reaches ``required_high_water`` or the draft leaves pending. While a row exists the draft is
# held from release. ``nudged_at`` set: the draft holds one of its category's look-ahead slots.
stale_drafts = Table(
    "stale_drafts",
    metadata,
    Column("review_id", String(40), primary_key=True),
    Column("project_id", String(40), nullable=False),
    Column("category_id", String(40), nullable=False),
    Column("required_high_water", BigInteger, nullable=False),
    # The rule that moved last (as its nudge names it), and the nudge: propagate_general_rule | rule_changed.
    Column("rule", Json, nullable=False),
    Column("reason", String(32), nullable=False),
    Column("propagate", Boolean, nullable=False),
    Column("suggested_batch", Integer, nullable=False),
    Column("nudged_at", UtcDateTime),
    Index("ix_stale_drafts_project_id_category_id_review_id", "project_id", "category_id", "review_id"),
)

# The pacing of one category of a project: the values in force when the sweep last read them from the
# rules context, when its window was last refilled, and how far the agent has worked through it.
pacing_windows = Table(
    "pacing_windows",
    metadata,
    Column("project_id", String(40), nullable=False),
    Column("category_id", String(40), nullable=False),
    Column("org_id", String(40), nullable=False),
    Column("lookahead_window", Integer, nullable=False),
    Column("rework_batch_max", Integer, nullable=False),
    Column("nudge_min_interval_ms", Integer, nullable=False),
    Column("last_nudged_at", UtcDateTime),
    Column("cursor_review_id", String(40), nullable=False, server_default=""),
    Column("cursor_advanced_count", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint("project_id", "category_id"),
)

idempotency_keys = idempotency_table(
    metadata,
    Column("review_id", String(40), nullable=False),
    Column("result_id", String(40), nullable=False, server_default=""),
)
