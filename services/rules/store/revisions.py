"""Rule revisions (append-only) and their lineages, the per-org ``rule_high_water``, the
write-approval setting and a project's pacing values."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from reviewloop.storage.schema import insert_new
from sqlalchemy import (
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rules.domain.ladder import Action, Kind, Layer, RuleRev, Scope, State
from rules.store.tables import (
    ProjectDocument,
    _project_setting,
    _put,
    org_counters,
    pacing_settings,
    rule_revisions,
    rule_settings,
)

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
    return bool(await _project_setting(conn, rule_settings, "write_approval", project_id))


async def set_write_approval(conn: AsyncConnection, org_id: str, project_id: str, on: bool) -> None:
    await _put(conn, rule_settings, {"project_id": project_id, "org_id": org_id}, {"write_approval": on})


# The pacing values the console stored (absent ones are the defaults).
pacing_values = ProjectDocument(pacing_settings, "settings")
