"""Events from review_state: each decided review's outcome in its category (``ReviewOutcome``),
counted once (the inbox deduplicates on event_id), a committed decision's new rule, and the same rule
taken back when its decision is undone (``RuleWithdrawn``). Clean approvals and drift move the maturity
counters; drift at the dial's limit demotes a rung and tells review_state."""

from __future__ import annotations

import logging
from typing import Any

from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.review.v1.events_pb2 import ReviewOutcome, RuleWithdrawn
from reviewloop.rules.v1.rules_pb2 import SaveRuleRequest
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.storage.inbox import Subscription
from reviewloop.tenancy import Principal

from rules import store
from rules.app.authority import author
from rules.app.dial import dial_for
from rules.app.graduation import emit_category_changed, maturity
from rules.app.rules import append_revision, save_requested
from rules.domain import graduation
from rules.domain.graduation import Outcome
from rules.domain.ladder import Action, State, restate

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


async def withdraw_requested(uow: UnitOfWork, event: RuleWithdrawn) -> None:
    """An undone decision's new rule, taken back as ``undo_rule`` takes back a creation (a retired rev,
    action ``undone``), only while the rule the decision saved is still its lineage's head: a lineage
    someone changed since (edited, promoted, retired) is theirs now and is left, logged. It arrives
    after the save (one review, one aggregate); a rule never saved (its save refused) is logged. A
    redelivery finds the head moved by its own undo and changes nothing."""
    principal = Principal.from_proto(event.principal)
    lineage_id = await store.rule_lineage_of(uow.conn, event.rule_id)
    history = await store.lineage(uow.conn, principal.org_id, lineage_id) if lineage_id else []
    head = history[-1] if history else None
    if head is None or head.id != event.rule_id or head.state is not State.ACTIVE:
        log.warning(
            "the undone review %s's rule %s is left: %s",
            event.review_id,
            event.rule_id,
            "never saved" if head is None else f"changed since (rev {head.rev} {head.state})",
        )
        return
    high_water = await store.bump_high_water(uow.conn, principal.org_id)
    rule = restate(
        history,
        head,
        action=Action.UNDONE,
        state=State.RETIRED,
        author=author(principal),
        rule_id=new_id("rule"),
        high_water=high_water,
        now=utcnow(),
    )
    await append_revision(uow, rule, withdrawn=True)  # a lost race is ``stale``: redelivered, then left


# What the Ingest RPC subscribes to (``reviewloop.service.ingest``).
SUBSCRIPTIONS: dict[str, Subscription[Any]] = {
    "review_outcome": Subscription(ReviewOutcome, count_outcome),
    "rule_requested": Subscription(SaveRuleRequest, save_requested),
    "rule_withdrawn": Subscription(RuleWithdrawn, withdraw_requested),
}
