"""The rules store's tables: rule revisions (append-only), the per-org high-water counter, rule
settings, categories, graduation proposals, the risk dial and its overrides, pacing settings, category
merges, composition-token keys and idempotency keys; ``_put``, the upsert both dialects speak, and a
project's settings read and merged (``ProjectDocument``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reviewloop.storage.idempotency import idempotency_table
from reviewloop.storage.schema import Json, UtcDateTime, insert_new, new_metadata
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

metadata = new_metadata()

rule_revisions = Table(
    "rule_revisions",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("lineage_id", String(40), nullable=False),
    Column("rev", BigInteger, nullable=False),
    Column("layer", String(16), nullable=False),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False, server_default=""),
    Column("agent_id", String(40), nullable=False, server_default=""),
    Column("scope", String(16), nullable=False),
    Column("category_id", String(40), nullable=False, server_default=""),
    Column("kind", String(8), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("rule_text", Text, nullable=False),
    Column("normalized_text", Text, nullable=False),
    Column("source_review_id", String(40), nullable=False, server_default=""),
    Column("author_kind", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("action", String(16), nullable=False),
    Column("changed_by_kind", String(16), nullable=False),
    Column("changed_by_id", String(40), nullable=False),
    Column("high_water", BigInteger, nullable=False, server_default="0"),
    Column("supersedes_id", String(40), nullable=False, server_default=""),
    Column("created_at", UtcDateTime, nullable=False),
    Column("source_turn_id", String(40), nullable=False, server_default=""),
    # The compare-and-set of read-before-write: two saves against the same rev insert the same
    # (lineage, rev + 1), and the constraint lets exactly one of them commit.
    UniqueConstraint("lineage_id", "rev"),
    Index("ix_rule_revisions_org_id_project_id", "org_id", "project_id"),
)

# One row per org: the monotonic rule high-water. Bumping it is also the per-org write lock that
# makes duplicate refusal race-free.
org_counters = Table(
    "org_counters",
    metadata,
    Column("org_id", String(40), primary_key=True),
    Column("rule_high_water", BigInteger, nullable=False),
)

rule_settings = Table(
    "rule_settings",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("write_approval", Boolean, nullable=False),
)

categories = Table(
    "categories",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("scope", String(16), nullable=False),
    Column("name", String(200), nullable=False),
    Column("normalized_name", String(200), nullable=False),
    Column("description", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("author_kind", String(16), nullable=False),
    Column("never_graduate", Boolean, nullable=False),
    Column("clean_approval_count", BigInteger, nullable=False),
    Column("drift_count", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("state_changed_at", UtcDateTime, nullable=False),
    # Set once merged into another category: retired, its name free again.
    Column("merged_into", String(40), nullable=False, server_default=""),
    Column("created_by_agent_id", String(40), nullable=False, server_default=""),
    Column("updated_at", UtcDateTime, nullable=False),
    Index("ix_categories_org_id_id", "org_id", "id"),
)

graduation_proposals = Table(
    "graduation_proposals",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("category_id", String(40), nullable=False, index=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("proposed_by", String(40), nullable=False),
    Column("from_state", String(16), nullable=False),
    Column("to_state", String(16), nullable=False),
    Column("note", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    # "proposed" until a human decides: "approved" (graduated to it) or "rejected" (with the reason).
    Column("status", String(16), nullable=False, server_default="proposed"),
    Column("reason", Text),
    Column("decided_by", String(40)),
    Column("decided_at", UtcDateTime),
    # The agent's opaque evidence for the human (the SDK's ``evidence``).
    Column("evidence", Json),
)

risk_dials = Table(
    "risk_dials",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("account", Json, nullable=False),
)

risk_overrides = Table(
    "risk_overrides",
    metadata,
    Column("project_id", String(40), nullable=False),
    Column("category_id", String(40), nullable=False),
    Column("overrides", Json, nullable=False),
    PrimaryKeyConstraint("project_id", "category_id"),
)

# A project's backlog pacing values (``domain.pacing``), as the console wrote them; unset = default.
pacing_settings = Table(
    "pacing_settings",
    metadata,
    Column("project_id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("settings", Json, nullable=False),
)

# The audit of category merges: one row per merge, who did it and why, and what it moved.
category_merges = Table(
    "category_merges",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(40), nullable=False),
    Column("project_id", String(40), nullable=False),
    Column("category_id", String(40), nullable=False),
    Column("into_category_id", String(40), nullable=False),
    Column("rationale", Text, nullable=False),
    Column("actor_kind", String(16), nullable=False),
    Column("actor_id", String(40), nullable=False),
    Column("rules_moved", Integer, nullable=False),
    Column("rules_retired", Integer, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_category_merges_category_id", "category_id"),
    Index("ix_category_merges_into_category_id", "into_category_id"),
)

token_keys = Table(
    "token_keys",
    metadata,
    Column("key_id", String(40), primary_key=True),
    # A legacy key kept in plain (before issue 35); null for derived keys, and wiped once retired.
    Column("secret", String(128)),
    Column("created_at", UtcDateTime, nullable=False),
    # A derived key: HMAC of the deployment key over (key_id, salt) (rules.domain.token.derive_key),
    # and the public name of the deployment key it was derived under.
    Column("salt", String(64)),
    Column("key_ref", String(16)),
    # A legacy key verifies the tokens already out until then, and signs nothing.
    Column("retire_at", UtcDateTime),
)

# save_rule and create_category remember the id they wrote (rules.app.env.idempotent).
idempotency_keys = idempotency_table(metadata, Column("result_id", String(40), nullable=False))


async def _put(conn: AsyncConnection, table: Table, keys: dict[str, Any], values: dict[str, Any]) -> None:
    """Write ``values`` to the row of ``keys``, inserting it if missing: an upsert both dialects
    speak (an insert that loses a race does nothing, and the update then applies)."""
    await insert_new(conn, table, {**keys, **values})
    await conn.execute(update(table).where(*(table.c[k] == v for k, v in keys.items())).values(**values))


async def _project_setting(conn: AsyncConnection, table: Table, name: str, project_id: str) -> Any:
    """Column ``name`` of the project's row in ``table`` (a settings table keyed by project); None when
    the project stored none."""
    query = select(table.c[name]).where(table.c.project_id == project_id)
    return (await conn.execute(query)).scalar_one_or_none()


@dataclass(frozen=True)
class ProjectDocument:
    """A project's JSON settings document (the risk dial's account fields, the pacing values): column
    ``column`` of a settings table keyed by project. A field it does not hold is at its default."""

    table: Table
    column: str

    async def read(self, conn: AsyncConnection, project_id: str) -> dict[str, Any]:
        """The fields the console stored; empty when it stored none."""
        return dict(await _project_setting(conn, self.table, self.column, project_id) or {})

    async def merge(
        self, conn: AsyncConnection, org_id: str, project_id: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Store the document with ``changes`` applied and return it: a None value drops its field (back
        to its default), any other sets it, a field not named stays."""
        document = await self.read(conn, project_id)
        for field, value in changes.items():
            if value is None:
                document.pop(field, None)
            else:
                document[field] = value
        await _put(conn, self.table, {"project_id": project_id, "org_id": org_id}, {self.column: document})
        return document
