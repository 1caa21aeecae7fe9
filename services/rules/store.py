"""The rules store: rule revisions (append-only), the per-org high-water counter, categories and
their maturity counters, graduation proposals, the risk dial, rule settings, token keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from reviewloop.storage.idempotency import idempotency_table
from reviewloop.storage.schema import Json, UtcDateTime, insert_new, new_metadata, utcnow
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
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rules.domain.graduation import Rung as GradRung
from rules.domain.ladder import Action, Kind, Layer, RuleRev, Scope, State

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


# --- rules -------------------------------------------------------------------------------------


# A revision's columns are its fields; these hold the value of a domain enum.
_RULE_ENUMS: dict[str, type[StrEnum]] = {
    "layer": Layer,
    "scope": Scope,
    "kind": Kind,
    "state": State,
    "action": Action,
}


def _rule(row: Any) -> RuleRev:
    m = row._mapping
    values: dict[str, Any] = {
        name: _RULE_ENUMS[name](m[name]) if name in _RULE_ENUMS else m[name]
        for name in RuleRev.__dataclass_fields__
    }
    return RuleRev(**values)


async def add_revision(conn: AsyncConnection, rule: RuleRev, normalized_text: str) -> None:
    """Append one revision; raises IntegrityError when (lineage, rev) is taken (a lost race)."""
    values = {name: getattr(rule, name) for name in RuleRev.__dataclass_fields__}
    for name in _RULE_ENUMS:
        values[name] = values[name].value
    await conn.execute(insert(rule_revisions).values(**values, normalized_text=normalized_text))


async def lineage(conn: AsyncConnection, org_id: str, lineage_id: str) -> list[RuleRev]:
    """Every revision of a lineage of ``org_id``, oldest first; another org's lineage reads empty."""
    rows = await conn.execute(
        select(rule_revisions)
        .where(rule_revisions.c.lineage_id == lineage_id, rule_revisions.c.org_id == org_id)
        .order_by(rule_revisions.c.rev)
    )
    return [_rule(r) for r in rows]


async def revisions_on_ladder(conn: AsyncConnection, org_id: str, project_id: str) -> list[RuleRev]:
    """Every revision that can sit on this project's ladder: its own and its org's house style."""
    rows = await conn.execute(
        select(rule_revisions).where(
            rule_revisions.c.org_id == org_id,
            or_(rule_revisions.c.layer == Layer.ORG.value, rule_revisions.c.project_id == project_id),
        )
    )
    return [_rule(r) for r in rows]


async def lineages_in_category(conn: AsyncConnection, org_id: str, category_id: str) -> list[list[RuleRev]]:
    """Every lineage of ``org_id`` with a revision in ``category_id`` (any project), each oldest first."""
    ids = select(rule_revisions.c.lineage_id).where(
        rule_revisions.c.org_id == org_id, rule_revisions.c.category_id == category_id
    )
    rows = await conn.execute(
        select(rule_revisions)
        .where(rule_revisions.c.org_id == org_id, rule_revisions.c.lineage_id.in_(ids))
        .order_by(rule_revisions.c.lineage_id, rule_revisions.c.rev)
    )
    lineages: dict[str, list[RuleRev]] = {}
    for row in rows:
        rule = _rule(row)
        lineages.setdefault(rule.lineage_id, []).append(rule)
    return list(lineages.values())


async def rule_lineage_of(conn: AsyncConnection, rule_id: str) -> str | None:
    row = (
        await conn.execute(select(rule_revisions.c.lineage_id).where(rule_revisions.c.id == rule_id))
    ).first()
    return str(row.lineage_id) if row else None


async def lineage_owner(conn: AsyncConnection, lineage_id: str) -> tuple[str, str] | None:
    row = (
        await conn.execute(
            select(rule_revisions.c.org_id, rule_revisions.c.project_id)
            .where(rule_revisions.c.lineage_id == lineage_id)
            .limit(1)
        )
    ).first()
    return (row.org_id, row.project_id) if row else None


async def bump_high_water(conn: AsyncConnection, org_id: str) -> int:
    """The org's next high-water. Holds the org's counter row until commit, so the rule writes of one
    org are serialized (on SQLite the database lock already serializes them)."""
    await insert_new(conn, org_counters, {"org_id": org_id, "rule_high_water": 0})
    result = await conn.execute(
        update(org_counters)
        .where(org_counters.c.org_id == org_id)
        .values(rule_high_water=org_counters.c.rule_high_water + 1)
        .returning(org_counters.c.rule_high_water)
    )
    return int(result.scalar_one())


async def write_approval(conn: AsyncConnection, project_id: str) -> bool:
    row = (
        await conn.execute(
            select(rule_settings.c.write_approval).where(rule_settings.c.project_id == project_id)
        )
    ).first()
    return bool(row.write_approval) if row else False


async def set_write_approval(conn: AsyncConnection, org_id: str, project_id: str, on: bool) -> None:
    await _put(conn, rule_settings, {"project_id": project_id, "org_id": org_id}, {"write_approval": on})


async def pacing_values(conn: AsyncConnection, project_id: str) -> dict[str, Any]:
    """The pacing values the console stored for ``project_id`` (absent ones are the defaults)."""
    row = (
        await conn.execute(
            select(pacing_settings.c.settings).where(pacing_settings.c.project_id == project_id)
        )
    ).first()
    return dict(row.settings) if row else {}


async def save_pacing_values(
    conn: AsyncConnection, org_id: str, project_id: str, values: dict[str, Any]
) -> None:
    await _put(conn, pacing_settings, {"project_id": project_id, "org_id": org_id}, {"settings": values})


# --- categories --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CategoryRow:
    id: str
    org_id: str
    project_id: str
    scope: str
    name: str
    description: str
    state: GradRung
    author_kind: str
    never_graduate: bool
    clean_approval_count: int
    drift_count: int
    version: int
    created_at: datetime
    state_changed_at: datetime
    updated_at: datetime
    merged_into: str = ""
    created_by_agent_id: str = ""  # empty: the console predefined it


def _category(row: Any) -> CategoryRow:
    m = row._mapping
    values = {name: m[name] for name in CategoryRow.__dataclass_fields__}
    return CategoryRow(**{**values, "state": GradRung(m["state"])})


def _visible(org_id: str, project_id: str) -> Any:
    """A project sees its org's shared categories and its own."""
    return (categories.c.org_id == org_id) & (
        (categories.c.scope == "org_shared") | (categories.c.project_id == project_id)
    )


async def add_category(conn: AsyncConnection, category: CategoryRow, normalized_name: str) -> None:
    values = dict(category.__dict__)
    values["state"] = category.state.value
    await conn.execute(insert(categories).values(**values, normalized_name=normalized_name))


async def get_category(
    conn: AsyncConnection, org_id: str, project_id: str, category_id: str, *, lock: bool = False
) -> CategoryRow | None:
    """The category if ``project_id`` can see it; ``lock`` holds its row until commit (PostgreSQL)."""
    query = select(categories).where(categories.c.id == category_id, _visible(org_id, project_id))
    if lock:
        query = query.with_for_update()
    row = (await conn.execute(query)).first()
    return _category(row) if row else None


async def category_owner(conn: AsyncConnection, category_id: str) -> tuple[str, str] | None:
    row = (
        await conn.execute(
            select(categories.c.org_id, categories.c.project_id).where(categories.c.id == category_id)
        )
    ).first()
    return (row.org_id, row.project_id) if row else None


async def category_named(
    conn: AsyncConnection, org_id: str, project_id: str, normalized_name: str
) -> CategoryRow | None:
    row = (
        await conn.execute(
            select(categories).where(
                _visible(org_id, project_id),
                categories.c.normalized_name == normalized_name,
                categories.c.merged_into == "",  # a merged category's name is free again
            )
        )
    ).first()
    return _category(row) if row else None


async def list_categories(
    conn: AsyncConnection, org_id: str, project_id: str, after_id: str, limit: int
) -> list[CategoryRow]:
    query = select(categories).where(_visible(org_id, project_id), categories.c.merged_into == "")
    if after_id:
        query = query.where(categories.c.id > after_id)
    rows = await conn.execute(query.order_by(categories.c.id).limit(limit))
    return [_category(r) for r in rows]


async def count_categories(conn: AsyncConnection, org_id: str, project_id: str) -> int:
    """How many categories ``list_categories`` pages through (every page)."""
    query = select(func.count()).select_from(categories)
    return int(
        await conn.scalar(query.where(_visible(org_id, project_id), categories.c.merged_into == "")) or 0
    )


# What moves a category without changing its record: ``updated_at`` stays.
_COUNTERS = frozenset({"clean_approval_count", "drift_count"})


async def compare_and_set_category(conn: AsyncConnection, current: CategoryRow, **changes: Any) -> bool:
    """Write ``changes`` only if the category is still at ``current.version``; the row count decides.
    Any change but the maturity counters' moves ``updated_at``."""
    if "state" in changes:
        changes["state"] = changes["state"].value
    if set(changes) - _COUNTERS:
        changes.setdefault("updated_at", utcnow())
    result = await conn.execute(
        update(categories)
        .where(categories.c.id == current.id, categories.c.version == current.version)
        .values(version=current.version + 1, **changes)
    )
    return bool(result.rowcount == 1)


async def add_proposal(conn: AsyncConnection, **values: Any) -> None:
    await conn.execute(insert(graduation_proposals).values(**values))


async def pending_proposals(conn: AsyncConnection, project_id: str) -> list[dict[str, Any]]:
    """This project's undecided proposals whose category still sits on the rung they proposed to leave
    (a human has not acted on it since), newest first."""
    p = graduation_proposals.c
    query = (
        select(graduation_proposals)
        .join(categories, categories.c.id == p.category_id)
        .where(p.project_id == project_id, p.status == "proposed", categories.c.state == p.from_state)
        .order_by(p.created_at.desc(), p.id.desc())
    )
    return [dict(row._mapping) for row in (await conn.execute(query)).all()]


async def category_proposals(
    conn: AsyncConnection, project_id: str, category_id: str
) -> list[dict[str, Any]]:
    """Every proposal of this project for the category, decided ones included, newest first."""
    p = graduation_proposals.c
    query = (
        select(graduation_proposals)
        .where(p.project_id == project_id, p.category_id == category_id)
        .order_by(p.created_at.desc(), p.id.desc())
    )
    return [dict(row._mapping) for row in (await conn.execute(query)).all()]


async def get_proposal(conn: AsyncConnection, proposal_id: str) -> dict[str, Any] | None:
    row = (
        await conn.execute(select(graduation_proposals).where(graduation_proposals.c.id == proposal_id))
    ).first()
    return dict(row._mapping) if row else None


async def decide_proposals(
    conn: AsyncConnection,
    ids: list[str],
    status: str,
    decided_by: str,
    decided_at: datetime,
    reason: str = "",
) -> int:
    """Close the still-undecided proposals among ``ids`` (compare-and-set on ``proposed``); how many."""
    p = graduation_proposals.c
    result = await conn.execute(
        update(graduation_proposals)
        .where(p.id.in_(ids), p.status == "proposed")
        .values(status=status, decided_by=decided_by, decided_at=decided_at, reason=reason or None)
    )
    return int(result.rowcount)


# --- risk dial ---------------------------------------------------------------------------------


async def account_dial(conn: AsyncConnection, project_id: str) -> dict[str, Any]:
    row = (
        await conn.execute(select(risk_dials.c.account).where(risk_dials.c.project_id == project_id))
    ).first()
    return dict(row.account) if row else {}


async def save_account_dial(
    conn: AsyncConnection, org_id: str, project_id: str, account: dict[str, Any]
) -> None:
    await _put(conn, risk_dials, {"project_id": project_id, "org_id": org_id}, {"account": account})


async def overrides(
    conn: AsyncConnection, project_id: str, category_id: str = ""
) -> dict[str, dict[str, Any]]:
    """category_id -> the override fields the console wrote (a None value: explicitly inherited)."""
    query = select(risk_overrides).where(risk_overrides.c.project_id == project_id)
    if category_id:
        query = query.where(risk_overrides.c.category_id == category_id)
    rows = await conn.execute(query.order_by(risk_overrides.c.category_id))
    return {r.category_id: dict(r.overrides) for r in rows}


async def save_overrides(
    conn: AsyncConnection, project_id: str, category_id: str, values: dict[str, Any]
) -> None:
    await _put(
        conn, risk_overrides, {"project_id": project_id, "category_id": category_id}, {"overrides": values}
    )


# --- composition-token keys --------------------------------------------------------------------


@dataclass(frozen=True)
class TokenKey:
    """A composition-token key's row: derived (``salt`` and ``key_ref``) or legacy (``secret``)."""

    key_id: str
    salt: str | None
    key_ref: str | None
    secret: bytes | None
    retire_at: datetime | None


def _token_key(row: Any) -> TokenKey:
    return TokenKey(
        row.key_id, row.salt, row.key_ref, bytes.fromhex(row.secret) if row.secret else None, row.retire_at
    )


async def newest_token_key(conn: AsyncConnection, key_ref: str) -> TokenKey | None:
    """The newest key derived under the deployment key named ``key_ref``: the one that signs."""
    t = token_keys.c
    row = (
        await conn.execute(
            select(token_keys)
            .where(t.key_ref == key_ref, t.salt.is_not(None))
            .order_by(t.created_at.desc(), t.key_id.desc())
            .limit(1)
        )
    ).first()
    return _token_key(row) if row else None


async def token_key(conn: AsyncConnection, key_id: str) -> TokenKey | None:
    row = (await conn.execute(select(token_keys).where(token_keys.c.key_id == key_id))).first()
    return _token_key(row) if row else None


async def add_token_key(conn: AsyncConnection, key_id: str, salt: str, key_ref: str) -> None:
    await conn.execute(
        insert(token_keys).values(key_id=key_id, salt=salt, key_ref=key_ref, secret=None, created_at=utcnow())
    )


async def retire_legacy_token_keys(conn: AsyncConnection, now: datetime, grace_s: int) -> None:
    """The migration path of keys kept in plain: each verifies for one token lifetime after the first
    boot that derives keys (the tokens already out), signs nothing, and is then wiped."""
    t = token_keys.c
    await conn.execute(
        update(token_keys)
        .where(t.secret.is_not(None), t.retire_at.is_(None))
        .values(retire_at=now + timedelta(seconds=grace_s))
    )
    await conn.execute(
        update(token_keys).where(t.secret.is_not(None), t.retire_at <= now).values(secret=None)
    )


# --- category merges --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CategoryMergeRow:
    id: str
    org_id: str
    project_id: str
    category_id: str  # merged away
    into_category_id: str  # the one that stays
    rationale: str
    actor_kind: str
    actor_id: str
    rules_moved: int
    rules_retired: int
    created_at: datetime


async def add_category_merge(conn: AsyncConnection, merge: CategoryMergeRow) -> None:
    await conn.execute(insert(category_merges).values(**merge.__dict__))


async def category_merges_of(conn: AsyncConnection, org_id: str, category_id: str) -> list[CategoryMergeRow]:
    """The merges ``category_id`` took part in, either side, oldest first."""
    rows = await conn.execute(
        select(category_merges)
        .where(
            category_merges.c.org_id == org_id,
            or_(
                category_merges.c.category_id == category_id,
                category_merges.c.into_category_id == category_id,
            ),
        )
        .order_by(category_merges.c.created_at, category_merges.c.id)
    )
    return [CategoryMergeRow(**dict(row._mapping)) for row in rows]
