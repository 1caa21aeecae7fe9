"""The SDK's rule and category writes on SQLite and PostgreSQL: a revision by ``supersedes_id`` (the same
compare-and-set as ``lineage_id`` + ``expected_rev``), graduation evidence, ``updated_at`` on rules and
categories, ``author_kind`` as ``agent | human``, and the broadcasts of a category rename or merge."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from alembic import command
from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.rules.v1.events_pb2 import BroadcastRequested
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, codec
from reviewloop.storage.engine import WRITE_OPTION
from reviewloop.storage.migrations import _config
from reviewloop.storage.schema import OUTBOX
from reviewloop.tenancy import ActorKind, Principal
from rules import app, store
from rules.__main__ import SPEC
from rules.app import RuleInput
from sqlalchemy import select, text

from tests.rules.test_app import SETTINGS, Tenant

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def _refusal(coro: Awaitable[Any]) -> DomainError:
    try:
        await coro
    except DomainError as error:
        return error
    raise AssertionError("the call succeeded")


async def _save(env: app.Env, who: Principal, text: str, **fields: Any) -> app.RuleView:
    view = await app.save_rule(env, who, RuleInput(rule_text=text, **fields))
    assert view is not None
    return view


async def _high_water(env: app.Env, org_id: str) -> int:
    async with env.db.engine.connect() as conn:
        row = (
            await conn.execute(
                select(store.org_counters.c.rule_high_water).where(store.org_counters.c.org_id == org_id)
            )
        ).first()
    return int(row.rule_high_water) if row else 0


async def _broadcasts(db: Database) -> list[dict[str, Any]]:
    async with db.engine.connect() as conn:
        rows = (
            await conn.execute(select(OUTBOX).where(OUTBOX.c.type == "broadcast").order_by(OUTBOX.c.id))
        ).all()
    return [codec.as_json_object(codec.decode(r.payload, BroadcastRequested)) for r in rows]


async def test_supersedes_id_revises_its_lineage_and_a_stale_one_writes_nothing(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    first = await _save(env, t.agent, "Always propose a concrete time.")
    second = await _save(env, t.agent, "Propose two concrete times.", supersedes_id=first.rule.id)
    assert (second.rule.lineage_id, second.rule.rev, second.rule.supersedes_id) == (
        first.rule.lineage_id,
        2,
        first.rule.id,
    )
    # The named revision is no longer the lineage's head: the expected_rev path's 409, nothing written.
    high_water = await _high_water(env, t.org)
    stale = await _refusal(_save(env, t.agent, "Propose three times.", supersedes_id=first.rule.id))
    assert (stale.code, stale.revision, stale.state) == (Code.STALE, 2, "active")
    history = await app.rule_history(env, t.agent, first.rule.lineage_id)
    assert [v.rule.rev for v in history] == [1, 2] and await _high_water(env, t.org) == high_water
    # Both ways at once: agreeing is one revision, disagreeing a 422 (bad_request naming the field).
    both = await _save(
        env, t.agent, "Propose three times.", supersedes_id=second.rule.id, lineage_id=first.rule.lineage_id
    )
    assert both.rule.rev == 3
    other = await _save(env, t.agent, "Keep it under 120 words.")
    for fields in ({"lineage_id": other.rule.lineage_id}, {"expected_rev": 2}):
        refused = await _refusal(_save(env, t.agent, "Four times.", supersedes_id=both.rule.id, **fields))
        assert (refused.code, refused.violations[0].field) == (Code.BAD_REQUEST, "/supersedes_id")
    # Another tenant's rule, or none, is not found; a non-rule id is a bad request.
    stranger = Tenant()
    missing = await _refusal(_save(env, stranger.agent, "Four times.", supersedes_id=both.rule.id))
    assert missing.code is Code.NOT_FOUND
    assert (
        await _refusal(_save(env, t.agent, "Four times a week.", supersedes_id=new_id("rule")))
    ).code is Code.NOT_FOUND
    assert (
        await _refusal(_save(env, t.agent, "Four times a week.", supersedes_id="rr_1"))
    ).code is Code.BAD_REQUEST


async def test_concurrent_saves_superseding_one_revision_one_wins(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    first = await _save(env, t.human, "Always propose a concrete time.")

    async def revise(i: int) -> str:
        try:
            view = await _save(
                env, t.human, f"Propose a concrete time, take {i}.", supersedes_id=first.rule.id
            )
        except DomainError as error:
            return error.code.value
        return view.status

    assert sorted(await asyncio.gather(*(revise(i) for i in range(4)))) == [
        "active",
        "stale",
        "stale",
        "stale",
    ]


async def test_a_rules_updated_at_moves_when_a_later_revision_supersedes_it(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    first = await _save(env, t.human, "Always propose a concrete time.")
    assert first.updated_at == first.rule.created_at
    second = await _save(env, t.human, "Propose two concrete times.", supersedes_id=first.rule.id)
    history = await app.rule_history(env, t.human, first.rule.lineage_id)
    assert [(v.status, v.updated_at) for v in history] == [
        ("superseded", second.rule.created_at),
        ("active", second.rule.created_at),
    ]
    retired = await app.retire_rule(env, t.human, first.rule.lineage_id, 2)
    history = await app.rule_history(env, t.human, first.rule.lineage_id)
    assert [v.updated_at for v in history] == [
        second.rule.created_at,
        retired.rule.created_at,
        retired.rule.created_at,
    ]


async def test_a_categorys_record_changes_move_updated_at_and_outcomes_do_not(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    made = await app.create_category(
        env, t.agent, name="Renewals", description="", scope="", never_graduate=False
    )
    assert (made.row.created_by_agent_id, made.row.author_kind) == (t.agent.actor_id, "agent")
    assert made.row.updated_at == made.row.created_at
    predefined = await app.create_category(
        env, t.admin, name="Legal", description="", scope="", never_graduate=True
    )
    assert (predefined.row.created_by_agent_id, predefined.row.author_kind) == ("", "human")
    renamed = await app.update_category(env, t.agent, made.row.id, name="Renewals Q3", description=None,
                                        never_graduate=None)  # fmt: skip
    assert renamed.row.updated_at > made.row.updated_at
    async with env.db.transaction() as uow:  # a maturity counter moves; the record does not
        assert await store.compare_and_set_category(uow.conn, renamed.row, clean_approval_count=1)
    counted = await app.get_category(env, t.agent, made.row.id)
    assert (counted.row.clean_approval_count, counted.row.updated_at) == (1, renamed.row.updated_at)


async def test_a_review_agents_rule_and_category_are_agent_authored(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    reviewer = Principal(t.org, t.project, ActorKind.REVIEW_AGENT, new_id("agt"))
    rule = await _save(env, reviewer, "Never promise a discount.")
    category = await app.create_category(
        env, reviewer, name="Pricing", description="", scope="", never_graduate=False
    )
    assert (rule.rule.author_kind, rule.rule.changed_by_kind, category.row.author_kind) == (
        "agent",
        "review_agent",
        "agent",
    )
    admins = await _save(env, t.admin, "Sign with the company name.")
    assert (admins.rule.author_kind, admins.rule.changed_by_kind) == ("human", "admin")


async def test_a_graduation_proposal_keeps_the_agents_evidence(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    category = await app.create_category(
        env, t.admin, name="Renewals", description="", scope="", never_graduate=False
    )
    proposal = await app.propose_graduation(env, t.agent, category.row.id, "", "", '{"approvals": 20}')
    assert proposal.evidence == {"approvals": 20}
    [listed] = await app.list_graduation_proposals(env, t.agent, category.row.id)
    assert (listed.id, listed.evidence) == (proposal.id, {"approvals": 20})
    for bad in ("[1]", "{", '{"x": "' + "y" * 20_000 + '"}'):
        refused = await _refusal(app.propose_graduation(env, t.agent, category.row.id, "", "", bad))
        assert (refused.code, refused.violations[0].field) == (Code.BAD_REQUEST, "/evidence")
    assert len(await app.list_graduation_proposals(env, t.agent, category.row.id)) == 1


async def test_a_rename_and_a_merge_are_broadcast_to_every_agent(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()

    async def category(name: str) -> str:
        made = await app.create_category(
            env, t.agent, name=name, description="", scope="", never_graduate=False
        )
        return made.row.id

    kept, dup = await category("Renewals"), await category("Renewal reminders")
    await app.update_category(env, t.agent, kept, name="Renewals", description=None, never_graduate=None)
    assert await _broadcasts(env.db) == []  # nothing moved: no broadcast
    await app.update_category(
        env, t.agent, kept, name="Contract renewals", description=None, never_graduate=None
    )
    await app.merge_categories(env, t.agent, dup, kept, "both are renewal reminders")
    sent = await _broadcasts(env.db)
    assert [(b["project_id"], b["category_id"], b["recheck_category"]) for b in sent] == [
        (
            "",
            kept,
            {"category_id": kept, "state": "supervised", "reason": "renamed", "name": "Contract renewals"},
        ),
        ("", dup, {"category_id": dup, "state": "supervised", "reason": "merged", "into_category_id": kept}),
    ]


async def test_the_migration_backfills_updated_at_and_narrows_stored_author_kinds(open_db: OpenDb) -> None:
    """A category from before the columns reads updated_at = created_at; stored review_agent / admin
    author kinds read agent / human."""
    db = await open_db(SPEC)
    cfg = _config(SPEC.migrations_dir, SPEC.metadata)

    def to(target: str) -> Any:
        def run(sync_conn: Any) -> None:
            cfg.attributes["connection"] = sync_conn
            (command.upgrade if target == "head" else command.downgrade)(cfg, target)

        return run

    t, engine = Tenant(), db.engine.execution_options(**{WRITE_OPTION: True})
    async with engine.begin() as conn:
        await conn.run_sync(to("e5c1a7b9d2f4"))  # the schema before the columns
        created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        for cat_id, kind in (("cat_1", "review_agent"), ("cat_2", "admin")):
            await conn.execute(
                text(
                    "INSERT INTO categories (id, org_id, project_id, scope, name, normalized_name, description, "
                    "state, author_kind, never_graduate, clean_approval_count, drift_count, version, created_at, "
                    "state_changed_at) VALUES (:id, :org, :prj, 'org_shared', :id, :id, '', 'supervised', :kind, "
                    "false, 0, 0, 1, :at, :at)"
                ),
                {"id": cat_id, "org": t.org, "prj": t.project, "kind": kind, "at": created},
            )
    async with engine.begin() as conn:
        await conn.run_sync(to("head"))
    env = app.Env(db, SETTINGS)
    old = [(await app.get_category(env, t.agent, c)).row for c in ("cat_1", "cat_2")]
    assert [(c.author_kind, c.updated_at, c.created_by_agent_id) for c in old] == [
        ("agent", created, ""),
        ("human", created, ""),
    ]
