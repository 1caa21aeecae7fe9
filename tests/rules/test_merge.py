"""merge_categories as a use case on SQLite and PostgreSQL: two merges of one pair race, a pending
proposal holds a merge back, an org-shared category moves every project's rules, the event says so."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.rules.v1.events_pb2 import CategoriesMerged
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, codec, utcnow
from reviewloop.storage.schema import OUTBOX
from rules import app, store
from rules.__main__ import SPEC
from sqlalchemy import select, update

from tests.rules.test_app import SETTINGS, Tenant, _category, _code, _save

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def _merges(db: Database) -> list[CategoriesMerged]:
    async with db.engine.connect() as conn:
        rows = (await conn.execute(select(OUTBOX).where(OUTBOX.c.type == "categories_merged"))).all()
    return [codec.decode(r.payload, CategoriesMerged) for r in rows]


async def test_two_merges_of_one_pair_never_merge_each_into_the_other(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    a = await _category(env, t.agent, "Pilot follow-up")
    b = await _category(env, t.agent, "Pilot followups")
    await _save(env, t.agent, "Quote the pilot start date.", category_id=a)
    await _save(env, t.agent, "Name the pilot's owner.", category_id=b)
    results = await asyncio.gather(
        app.merge_categories(env, t.agent, a, b, "same purpose"),
        app.merge_categories(env, t.admin, b, a, "same purpose"),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, app.Merge)]
    lost = [r for r in results if isinstance(r, DomainError)]
    assert len(won) == 1 and [e.code for e in lost] == [Code.CONFLICT], results
    rows = [(await app.get_category(env, t.admin, c)).row for c in (a, b)]
    assert sorted(bool(r.merged_into) for r in rows) == [False, True], rows
    assert len(await _merges(env.db)) == 1
    survivor = next(r.id for r in rows if not r.merged_into)
    snapshot = await app.get_rules(
        env, t.agent, scope="category", category_id=survivor, agent_id="", status=""
    )
    assert len(snapshot.rules) == 2  # both categories' rules now govern the survivor


async def test_a_pending_proposal_holds_a_merge_back(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    a, b = await _category(env, t.agent, "One"), await _category(env, t.agent, "Two")
    await app.set_rule_settings(env, t.admin, True)
    proposed = await _save(env, t.agent, "Open with the prospect's goal.", category_id=b)
    assert proposed.status == "proposed"
    assert await _code(app.merge_categories(env, t.admin, b, a, "same")) is Code.WRONG_STATE
    assert not (await app.get_category(env, t.admin, b)).row.merged_into
    assert await _merges(env.db) == []


async def test_an_org_shared_category_moves_every_projects_rules_and_only_into_a_shared_one(
    open_db: OpenDb,
) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    sibling = t.sibling_project()
    shared_a, shared_b = await _category(env, t.admin, "Renewals"), await _category(env, t.admin, "Renewal")
    local = (
        await app.create_category(
            env, t.admin, name="Local", description="", scope="project", never_graduate=False
        )
    ).row.id
    assert await _code(app.merge_categories(env, t.admin, shared_b, local, "same")) is Code.BAD_REQUEST
    theirs = await _save(env, sibling, "Mention the renewal date first.", category_id=shared_b)
    merge = await app.merge_categories(env, t.admin, shared_b, shared_a, "same purpose")
    assert (merge.rules_moved, merge.merged.row.merged_into) == (1, shared_a)
    [history_head] = (await app.rule_history(env, sibling, theirs.rule.lineage_id))[-1:]
    assert (history_head.rule.category_id, history_head.rule.action.value) == (shared_a, "merged")
    [event] = await _merges(env.db)
    assert (event.project_id, event.category_id, event.into_category_id) == ("", shared_b, shared_a)
    # The same key with another body is a caller bug.
    c = await _category(env, t.admin, "Third")
    await app.merge_categories(env, t.admin, shared_a, c, "same", idempotency_key="k1")
    other = app.merge_categories(env, t.admin, shared_a, shared_b, "same", idempotency_key="k1")
    assert await _code(other) is Code.IDEMPOTENCY_CONFLICT


async def _refusal(coro: Awaitable[object]) -> tuple[Code, str]:
    try:
        await coro
    except DomainError as error:
        return error.code, dict(error.hints).get("reason", "")
    raise AssertionError("the merge went through")


async def test_a_merge_is_audited_with_its_rationale_on_both_sides(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    a, b = await _category(env, t.agent, "Pilot follow-up"), await _category(env, t.agent, "Pilot followups")
    await _save(env, t.agent, "Quote the pilot start date.", category_id=a)
    merge = await app.merge_categories(env, t.agent, a, b, "  Both follow up on a pilot.  ")
    assert merge.audit is not None
    assert (merge.audit.category_id, merge.audit.into_category_id, merge.audit.rationale) == (
        a,
        b,
        "Both follow up on a pilot.",
    )
    assert (merge.audit.actor_kind, merge.audit.actor_id) == ("agent", t.agent.actor_id)
    assert (merge.audit.rules_moved, merge.audit.rules_retired) == (1, 0)
    assert await app.category_audit(env, t.human, a) == [merge.audit]
    assert await app.category_audit(env, t.human, b) == [merge.audit]
    # A repeat answers the same merge and records nothing new.
    again = await app.merge_categories(env, t.agent, a, b, "again")
    assert again.audit == merge.audit and await app.category_audit(env, t.human, b) == [merge.audit]
    stranger = Tenant()
    assert await _code(app.category_audit(env, stranger.agent, a)) is Code.NOT_FOUND


async def test_an_agent_merges_only_within_the_catalogs_limits(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()

    async def pair() -> tuple[str, str]:
        return await _category(env, t.agent, new_id("cat")), await _category(env, t.agent, new_id("cat"))

    old, young = await pair()
    async with env.db.transaction() as uow:
        await uow.conn.execute(
            update(store.categories)
            .where(store.categories.c.id == old)
            .values(created_at=utcnow() - timedelta(hours=25))
        )
    assert await _refusal(app.merge_categories(env, t.agent, old, young, "same")) == (
        Code.FORBIDDEN_SCOPE,
        "too_old",
    )

    private = (
        await app.create_category(
            env, t.agent, name="Mine", description="", scope="project", never_graduate=False
        )
    ).row.id
    assert await _refusal(app.merge_categories(env, t.agent, private, young, "same")) == (
        Code.FORBIDDEN_SCOPE,
        "not_shared",
    )

    a, b = await pair()
    await app.set_risk_dial(env, t.admin, account=None, categories=[(a, {"quorum_approvals": 2})])
    assert await _refusal(app.merge_categories(env, t.agent, a, b, "same")) == (
        Code.FORBIDDEN_SCOPE,
        "policy_differs",
    )

    c, d = await pair()
    await _save(env, t.sibling_project(), "Mention the renewal date first.", category_id=c)
    assert await _refusal(app.merge_categories(env, t.agent, c, d, "same")) == (
        Code.FORBIDDEN_SCOPE,
        "not_exclusive",
    )
    # Nothing moved; the console still merges any of them.
    assert not (await app.get_category(env, t.admin, c)).row.merged_into
    assert (await app.merge_categories(env, t.admin, old, young, "same")).merged.row.merged_into == young
