"""Events from the rules context, each handled once: a rule change marks the pending drafts it leaves stale,
and the pacing nudges them a window at a time (``rule_changed`` for a category rule,
``propagate_general_rule`` with its siblings and ``suggested_batch`` for a general one; ``pacing``); a
graduation or reconciliation nudges ``recheck_category``, and so does a merge, once the merged category's
pending drafts moved to the category that stays."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.rules.v1.events_pb2 import CategoriesMerged, CategoryChanged, RuleChanged
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.storage.inbox import Subscription, ingest_each

from review_state import store
from review_state.app import _events, pacing
from review_state.app.env import Env
from review_state.domain.machine import RULES_NUDGES
from review_state.store import pacing as paced

log = logging.getLogger(__name__)


async def _rule_changed(uow: UnitOfWork, change: RuleChanged) -> bool:
    if change.withdrawn:  # taken back with the decision that saved it: as if it had never held a draft
        await paced.lift(uow.conn, change.org_id, change.rule.lineage_id)
        return True  # the slots it freed go to the next held drafts
    await pacing.mark_stale(uow, change)  # nudged a window at a time by the refill after the commit
    return True


async def _category_changed(uow: UnitOfWork, change: CategoryChanged) -> None:
    if not change.category_id:
        return
    drafts = await store.pending_in_scope(
        uow.conn,
        org_id=change.org_id,
        project_id=change.project_id,
        category_id=change.category_id,
        agent_id="",
    )
    for draft in drafts:
        _events.publish(uow, draft, RULES_NUDGES["category"], _events.recheck_category(change))


async def _categories_merged(uow: UnitOfWork, merge: CategoriesMerged) -> None:
    """The merged category's pending drafts move to the one that stays, each with a ``recheck_category``
    (reason ``merged``) for its agent: its category and the rules it composes under changed."""
    drafts = await store.pending_in_scope(
        uow.conn, org_id=merge.org_id, project_id=merge.project_id, category_id=merge.category_id, agent_id=""
    )
    now = utcnow()
    for draft in drafts:
        moved = await store.compare_and_set(
            uow, draft, replace(draft, category_id=merge.into_category_id, updated_at=now)
        )
        if moved is None:  # the rows are locked; a lost CAS means a writer got in: the relay redelivers
            raise DomainError(Code.STALE, f"review {draft.id} changed while its category merged")
        _events.publish(uow, moved[0], RULES_NUDGES["category"], _events.recheck_merged(merge))
    # A stale draft's pacing slot follows it: the category that stays paces it from now on.
    await paced.move_to_category(uow.conn, [d.id for d in drafts], merge.into_category_id)


SUBSCRIPTIONS: dict[str, Subscription[Any]] = {
    "rule_changed": Subscription(RuleChanged, _rule_changed),
    "category_changed": Subscription(CategoryChanged, _category_changed),
    "categories_merged": Subscription(CategoriesMerged, _categories_merged),
}


async def ingest(env: Env, events: Iterable[common_pb2.Event]) -> tuple[int, int]:
    """Handle each event once (deduplicated on event_id). Returns (accepted, duplicates)."""
    events = list(events)
    if any(e.type in SUBSCRIPTIONS for e in events):
        env.stacks.invalidate()  # before the handlers look for the drafts a change leaves stale
    marked: list[bool] = []
    done = await ingest_each(env.db, events, SUBSCRIPTIONS, on_commit=marked.append)
    if any(marked):
        try:
            await pacing.sweep(env)  # open the windows of the drafts a rule change just left stale
        except Exception:  # the sweep on its timer comes back: the events are handled either way
            log.exception("pacing refill after ingest failed")
    return done.accepted, done.duplicates
