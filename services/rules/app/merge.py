"""Merging a category into another (the catalog's ``merge_categories``): the spec's "reconciled".

In one unit of work the merged category's live rules move to the category that stays (a new revision
of each lineage, action ``merged``; one that would twin a rule already there is retired instead), the
merged category is retired (``merged_into``), and review_state learns it (``categories_merged``) to
move the pending drafts and ask their agents to recheck (``recheck_category``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.rules.v1.events_pb2 import CategoriesMerged
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.app.authority import author, require
from rules.app.categories import CategoryView, get_category, load_category
from rules.app.env import REVIEW_STATE, Env, idempotent
from rules.app.rules import append_revision, duplicate_of
from rules.domain.graduation import Rung as Grad
from rules.domain.ladder import Action, State, restate
from rules.store import CategoryRow

MAX_RATIONALE_BYTES = 2000


@dataclass(frozen=True)
class Merge:
    merged: CategoryView
    into: CategoryView
    rules_moved: int
    rules_retired: int


def _check_agent_may(merged: CategoryRow, into: CategoryRow) -> None:
    """An agent consolidates only young duplicates of its own kind: agent-authored and supervised on both
    sides; anything a human curated or graduated needs the console."""
    for row in (merged, into):
        if row.author_kind != "agent" or row.state is not Grad.SUPERVISED:
            raise DomainError(
                Code.FORBIDDEN_SCOPE,
                f"Category {row.id} is {row.author_kind}-authored and {row.state}: merging it needs human "
                "curation (an admin key). An agent merges only agent-authored, supervised categories.",
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
    if not into_category_id:
        raise invalid("/into_category_id", "name the category that stays (cat_...)")
    if into_category_id == category_id:
        raise invalid("/into_category_id", "must be another category than the one merged away")
    rationale = rationale.strip()
    if not rationale or len(rationale.encode()) > MAX_RATIONALE_BYTES:
        raise invalid(
            "/rationale", f"say why both describe the same purpose (1 to {MAX_RATIONALE_BYTES} bytes)"
        )

    async def act(uow: UnitOfWork) -> str:
        # The org's write lock first: two merges of one pair (either way round) read each other's result,
        # so no two categories ever end up merged into each other.
        high_water = await store.bump_high_water(uow.conn, principal.org_id)
        merged = await load_category(uow.conn, principal, category_id)
        into = await load_category(uow.conn, principal, into_category_id)
        if merged.merged_into == into.id:
            return merged.id  # done already: answer it again
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
        if principal.actor_kind is ActorKind.AGENT:
            _check_agent_may(merged, into)
        await _move_rules(uow, principal, merged, into, high_water)
        if not await store.compare_and_set_category(uow.conn, merged, merged_into=into.id):
            raise DomainError(Code.STALE, "The category changed at the same moment; re-read it and retry.")
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
        return merged.id

    fields = {"verb": "merge_categories", "category_id": category_id, "into": into_category_id}
    await idempotent(env, principal, idempotency_key, {**fields, "rationale": rationale}, act)
    async with env.db.engine.connect() as conn:
        moved, retired = await _counts(conn, principal.org_id, category_id, into_category_id)
    return Merge(
        merged=await get_category(env, principal, category_id),
        into=await get_category(env, principal, into_category_id),
        rules_moved=moved,
        rules_retired=retired,
    )
