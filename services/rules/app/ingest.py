"""Events from review_state: each decided review's outcome in its category (``ReviewOutcome``),
counted once (the inbox deduplicates on event_id), and a committed decision's new rule. Clean approvals and drift move the maturity
counters; drift at the dial's limit demotes a rung and tells review_state."""

from __future__ import annotations

import logging
from typing import Any

from reviewloop.errors import Code, DomainError
from reviewloop.review.v1.events_pb2 import ReviewOutcome
from reviewloop.rules.v1.rules_pb2 import SaveRuleRequest
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.storage.inbox import Subscription

from rules import store
from rules.app.dial import dial_for
from rules.app.graduation import emit_category_changed, maturity
from rules.app.rules import save_requested
from rules.domain import graduation
from rules.domain.graduation import Outcome

log = logging.getLogger(__name__)


async def count_outcome(uow: UnitOfWork, event: ReviewOutcome) -> None:
    """Move the category's counters by one outcome; demote a rung when drift reached the limit."""
    try:
        outcome = Outcome(event.outcome)
    except ValueError:
        outcome = None
    if outcome is None or not event.org_id or not event.project_id:
        log.error("rules refused malformed review_outcome of review %s: %s", event.review_id, event)
        return
    if not event.category_id:
        return
    row = await store.get_category(uow.conn, event.org_id, event.project_id, event.category_id, lock=True)
    if row is None:
        log.warning(
            "review_outcome of review %s names unknown category %s", event.review_id, event.category_id
        )
        return
    dial = await dial_for(uow.conn, event.project_id, event.category_id)
    clean, drift, demote_to = graduation.after_outcome(
        maturity(row, utcnow()), outcome, dial["drift_demote_after"]
    )
    changes: dict[str, Any] = {"clean_approval_count": clean, "drift_count": drift}
    if demote_to is not None:
        changes = {
            "state": demote_to,
            "clean_approval_count": 0,
            "drift_count": 0,
            "state_changed_at": utcnow(),
        }
    if not await store.compare_and_set_category(uow.conn, row, **changes):
        raise DomainError(Code.STALE, "category changed concurrently; the relay redelivers")
    if demote_to is not None:
        emit_category_changed(uow, row, demote_to, "demoted")


# What the Ingest RPC subscribes to (``reviewloop.service.ingest``).
SUBSCRIPTIONS: dict[str, Subscription[Any]] = {
    "review_outcome": Subscription(ReviewOutcome, count_outcome),
    "rule_requested": Subscription(SaveRuleRequest, save_requested),
}
