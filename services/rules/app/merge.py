"""Merging a category into another (the catalog's ``merge_categories``): the spec's "reconciled".

In one unit of work the merged category's live rules move to the category that stays (a new revision
of each lineage, action ``merged``; one that would twin a rule already there is retired instead), the
merged category is retired (``merged_into``), and review_state learns it (``categories_merged``) to
move the pending drafts and ask their agents to recheck (``recheck_category``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from itertools import pairwise

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.rules.v1.events_pb2 import CategoriesMerged
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.app.authority import author, require
from rules.app.categories import CategoryView, broadcast_category_moved, get_category, load_category
from rules.app.dial import dial_for
from rules.app.env import REVIEW_STATE, Env, idempotent
from rules.app.rules import append_revision, duplicate_of
from rules.domain.graduation import Rung as Grad
from rules.domain.ladder import Action, State, restate
from rules.store import CategoryRow

MAX_RATIONALE_BYTES = 2000


# The skill catalog's limits on an agent's merge: young duplicates only.
AGENT_MERGE_MAX_AGE = timedelta(hours=24)
CURATION = "merging it needs human curation (an admin key)"


@dataclass(frozen=True)
class Merge:
    merged: CategoryView
    into: CategoryView
    rules_moved: int
    rules_retired: int
    audit: store.CategoryMergeRow | None = None  # None only for a merge made before the audit existed


def _refused(reason: str, detail: str) -> DomainError:
    return DomainError(Code.FORBIDDEN_SCOPE, detail, hints=(("reason", reason),))


async def _check_agent_may(
    conn: AsyncConnection, principal: Principal, merged: CategoryRow, into: CategoryRow
) -> None:
    """The catalog's limits on an agent's merge (``merge_categories``): both categories agent-authored,
    shared, supervised, under 24 hours old, with matching policy and in exclusive use of the agent's
    project. Anything else is ``forbidden_scope`` naming the first limit it breaks (``reason``)."""
    now = utcnow()
    for row in (merged, into):
        if row.author_kind != "agent":
            raise _refused("human_curated", f"Category {row.id} is {row.author_kind}-authored: {CURATION}.")
        if row.state is not Grad.SUPERVISED:
            raise _refused("graduated", f"Category {row.id} is {row.state}, not supervised: {CURATION}.")
        if row.scope != "org_shared":
            raise _refused("not_shared", f"Category {row.id} is {row.scope}-scoped, not shared: {CURATION}.")
        if now - row.created_at >= AGENT_MERGE_MAX_AGE:
            hours = (now - row.created_at).total_seconds() / 3600
            raise _refused(
                "too_old",
                f"Category {row.id} is {hours:.0f} hours old; an agent merges only categories under 24 hours "
                f"old: {CURATION}.",
            )
        others = {
            h[-1].project_id
            for h in await store.lineages_in_category(conn, principal.org_id, row.id)
            if h[-1].project_id != principal.project_id
        }
        if row.project_id != principal.project_id or others:
            user = row.project_id if row.project_id != principal.project_id else sorted(others)[0]
            raise _refused(
                "not_exclusive",
                f"Category {row.id} is in use by project {user} too, not only yours: {CURATION}.",
            )
    a = await dial_for(conn, principal.project_id, merged.id)
    b = await dial_for(conn, principal.project_id, into.id)
    differs = sorted(name for name in a if a[name] != b[name])
    if differs or merged.never_graduate != into.never_graduate:
        what = ", ".join(differs) or "never_graduate"
        raise _refused(
            "policy_differs",
            f"Categories {merged.id} and {into.id} are governed differently ({what}): {CURATION}.",
        )


async def _move_rules(
    uow: UnitOfWork, principal: Principal, merged: CategoryRow, into: CategoryRow, high_water: int
) -> None:
    conn = uow.conn
    for history in await store.lineages_in_category(conn, principal.org_id, merged.id):
        head = history[-1]
        if head.category_id != merged.id or head.state is State.RETIRED:
            continue  # moved away earlier, or history only
        if head.state is State.PROPOSED:
            raise DomainError(
                Code.WRONG_STATE,
                f"Rule lineage {head.lineage_id} of {merged.id} has a pending proposal (rev {head.rev}); "
                "approve or reject it before merging the category.",
                state=head.state.value,
                revision=head.rev,
                allowed_actions=("approve_rule", "reject_rule"),
            )
        moved = replace(head, category_id=into.id)
        twin = duplicate_of(moved, await store.revisions_on_ladder(conn, principal.org_id, head.project_id))
        rule = restate(
            history,
            moved,
            action=Action.MERGED,
            state=State.RETIRED if twin else State.ACTIVE,
            author=author(principal),
            rule_id=new_id("rule"),
            high_water=high_water,
            now=utcnow(),
        )
        await append_revision(uow, rule)


async def _counts(conn: AsyncConnection, org_id: str, merged_id: str, into_id: str) -> tuple[int, int]:
    """(moved, retired as twins): the lineages whose ``merged`` revision took them from one to the other."""
    moved = retired = 0
    for history in await store.lineages_in_category(conn, org_id, merged_id):
        for before, after in pairwise(history):
            if after.action is Action.MERGED and (before.category_id, after.category_id) == (
                merged_id,
                into_id,
            ):
                moved += after.state is State.ACTIVE
                retired += after.state is State.RETIRED
    return moved, retired


def _checked_rationale(category_id: str, into_category_id: str, rationale: str) -> str:
    if not into_category_id:
        raise invalid("/into_category_id", "name the category that stays (cat_...)")
    if into_category_id == category_id:
        raise invalid("/into_category_id", "must be another category than the one merged away")
    rationale = rationale.strip()
    if not rationale or len(rationale.encode()) > MAX_RATIONALE_BYTES:
        raise invalid(
            "/rationale", f"say why both describe the same purpose (1 to {MAX_RATIONALE_BYTES} bytes)"
        )
    return rationale


def _check_mergeable(merged: CategoryRow, into: CategoryRow) -> None:
    """Neither side merged elsewhere already, and a shared category goes only into a shared one."""
    for row in (merged, into):
        if row.merged_into:
            raise DomainError(
                Code.CONFLICT,
                f"Category {row.id} was already merged into {row.merged_into}; re-read both and merge "
                "into where it went.",
                hints=(("merged_into", row.merged_into),),
            )
    if merged.scope == "org_shared" and into.scope != "org_shared":
        raise invalid(
            "/into_category_id",
            "an org_shared category merges only into another org_shared one: its drafts and rules span "
            "every project of the org",
        )


async def _record_merge(
    uow: UnitOfWork, principal: Principal, merged: CategoryRow, into: CategoryRow, rationale: str
) -> None:
    """The merge's audit row, and the news of it: review_state moves the drafts, agents hear it."""
    moved, retired = await _counts(uow.conn, principal.org_id, merged.id, into.id)
    await store.add_category_merge(
        uow.conn,
        store.CategoryMergeRow(
            id=new_id("cmg"),
            org_id=principal.org_id,
            project_id=principal.project_id,
            category_id=merged.id,
            into_category_id=into.id,
            rationale=rationale,
            actor_kind=principal.actor_kind.value,
            actor_id=principal.actor_id,
            rules_moved=moved,
            rules_retired=retired,
            created_at=utcnow(),
        ),
    )
    uow.emit(
        REVIEW_STATE,
        principal.org_id,  # the aggregate of rule_changed: the drafts move after the rules did
        "categories_merged",
        CategoriesMerged(
            org_id=principal.org_id,
            project_id="" if merged.scope == "org_shared" else merged.project_id,
            category_id=merged.id,
            into_category_id=into.id,
            state=into.state.value,
        ),
    )
    broadcast_category_moved(uow, merged, "merged", state=into.state.value, into=into.id)


async def merge_categories(
    env: Env,
    principal: Principal,
    category_id: str,
    into_category_id: str,
    rationale: str,
    idempotency_key: str = "",
) -> Merge:
    """Merge ``category_id`` into ``into_category_id``. A repeat of a merge already done answers it
    again; either side already merged elsewhere is ``conflict`` naming where it went."""
    require(principal, (ActorKind.ADMIN, ActorKind.AGENT), "Merging categories")
    rationale = _checked_rationale(category_id, into_category_id, rationale)

    async def act(uow: UnitOfWork) -> str:
        # The org's write lock first: two merges of one pair (either way round) read each other's result,
        # so no two categories ever end up merged into each other.
        high_water = await store.bump_high_water(uow.conn, principal.org_id)
        merged = await load_category(uow.conn, principal, category_id)
        into = await load_category(uow.conn, principal, into_category_id)
        if merged.merged_into == into.id:
            return merged.id  # done already: answer it again
        _check_mergeable(merged, into)
        if principal.actor_kind is ActorKind.AGENT:
            await _check_agent_may(uow.conn, principal, merged, into)
        await _move_rules(uow, principal, merged, into, high_water)
        if not await store.compare_and_set_category(uow.conn, merged, merged_into=into.id):
            raise DomainError(Code.STALE, "The category changed at the same moment; re-read it and retry.")
        await _record_merge(uow, principal, merged, into, rationale)
        return merged.id

    fields = {"verb": "merge_categories", "category_id": category_id, "into": into_category_id}
    await idempotent(env, principal, idempotency_key, {**fields, "rationale": rationale}, act)
    async with env.db.engine.connect() as conn:
        moved, retired = await _counts(conn, principal.org_id, category_id, into_category_id)
        audit = [
            m
            for m in await store.category_merges_of(conn, principal.org_id, category_id)
            if (m.category_id, m.into_category_id) == (category_id, into_category_id)
        ]
    return Merge(
        merged=await get_category(env, principal, category_id),
        into=await get_category(env, principal, into_category_id),
        rules_moved=moved,
        rules_retired=retired,
        audit=audit[-1] if audit else None,
    )


async def category_audit(env: Env, principal: Principal, category_id: str) -> list[store.CategoryMergeRow]:
    """The merges ``category_id`` took part in (merged away or merged into), oldest first: who, when,
    from, into, why and what moved. Errors: ``not_found`` for a category the project cannot see."""
    async with env.db.engine.connect() as conn:
        await load_category(conn, principal, category_id)
        return await store.category_merges_of(conn, principal.org_id, category_id)
