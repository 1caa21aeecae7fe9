"""Events from the rules context, each handled once: a rule change nudges every pending draft in its
scope (``rule_changed`` for a category rule, ``propagate_general_rule`` with its siblings and a small
``suggested_batch`` for a general one); a graduation or reconciliation nudges ``recheck_category``, and
so does a merge, once the merged category's pending drafts moved to the category that stays."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from google.protobuf.message import Message
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.rules.v1.events_pb2 import CategoriesMerged, CategoryChanged, RuleChanged
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.storage.inbox import Subscription, ingest_each

from review_state import store
from review_state.app import _events
from review_state.app.env import Env
from review_state.domain.machine import RULES_NUDGES


async def _rule_changed(uow: UnitOfWork, change: RuleChanged) -> None:
    general = change.scope != "category"
    high_water = change.rule_high_water
    drafts = await store.pending_in_scope(
        uow.conn,
        org_id=change.org_id,
        project_id=change.project_id,
        category_id="" if general else change.category_id,
        agent_id=change.agent_id,
    )
    drafts = [d for d in drafts if not high_water or d.rule_high_water < high_water]
    per_category = Counter(d.category_id for d in drafts)
    reason = RULES_NUDGES["general_rule" if general else "category_rule"]
    for draft in drafts:
        if general:
            siblings = per_category[draft.category_id] - 1
            payload: Message = _events.propagate_general_rule(draft, change, siblings, high_water)
        else:
            payload = _events.rule_changed(draft, change, high_water)
        _events.publish(uow, draft, reason, payload)


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
            uow.conn, draft, category_id=merge.into_category_id, updated_at=now
        )
        if moved is None:  # the rows are locked; a lost CAS means a writer got in: the relay redelivers
            raise DomainError(Code.STALE, f"review {draft.id} changed while its category merged")
        _events.publish(uow, moved, RULES_NUDGES["category"], _events.recheck_merged(merge))


SUBSCRIPTIONS: dict[str, Subscription[Any]] = {
    "rule_changed": Subscription(RuleChanged, _rule_changed),
    "category_changed": Subscription(CategoryChanged, _category_changed),
    "categories_merged": Subscription(CategoriesMerged, _categories_merged),
}


async def ingest(env: Env, events: Iterable[common_pb2.Event]) -> tuple[int, int]:
    """Handle each event once (deduplicated on event_id). Returns (accepted, duplicates)."""
    done = await ingest_each(env.db, events, SUBSCRIPTIONS)
    return done.accepted, done.duplicates
