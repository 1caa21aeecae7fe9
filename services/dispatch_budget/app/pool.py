"""Use cases of the shared-pool auto-send governor: consume a pool unit with a receipt before a
release, settle the receipt once (refund only when the send never happened), list the pools.

The atomicity lives here, in dispatch_budget, because the pool is shared across orgs and projects and
every review_state replica releases into it: only a store that sees every release can bound it. A
receipt insert (unique per review) and the counter's conditional increment commit in one unit, so a
retry spends nothing more and concurrent releases never pass the budget; a refund is a compare-and-set
on the receipt (consumed -> refunded) and the counter's decrement in one unit, so a unit comes back at
most once."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from reviewloop.budget.v1 import budget_pb2
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.storage import Database, UnitOfWork, utcnow
from reviewloop.storage.inbox import Subscription
from reviewloop.tenancy import ActorKind, Principal

from dispatch_budget import store
from dispatch_budget.domain.autosend import utc_day
from dispatch_budget.domain.pool import Outcome, PoolBudgets, ReceiptStatus, sending_pool, settled_status

log = logging.getLogger(__name__)

OPERATOR_ORG = "*"  # the deployment's own principal (the bootstrap admin token), across orgs


@dataclass(frozen=True)
class PoolSend:
    allowed: bool
    receipt_id: str
    pool: str
    used_today: int
    budget_per_day: int
    status: str


@dataclass(frozen=True)
class PoolsToday:
    day: str
    pools: list[tuple[store.PoolDay, int]]
    default_budget: int


class _OverBudget(Exception):
    """Rolls back the receipt of a send the pool has no room for."""


def _review_id(review_id: str) -> str:
    if not review_id:
        raise invalid("/review_id", "the review releasing into the pool is required")
    return review_id


async def consume_pool_send(
    db: Database, budgets: PoolBudgets, principal: Principal, *, sender: str, review_id: str
) -> PoolSend:
    """Spend one unit of the sender's pool for today (UTC), with a receipt, once per review (a refunded
    receipt is spent anew by the review's next release)."""
    pool, review_id = sending_pool(sender), _review_id(review_id)
    budget = budgets.of(pool)
    project = principal.project_id
    try:
        async with db.transaction() as uow:
            conn, now = uow.conn, utcnow()
            day = utc_day(now)
            receipt_id = new_id("rcpt")
            first = await store.add_pool_receipt(
                conn,
                project_id=project,
                org_id=principal.org_id,
                review_id=review_id,
                receipt_id=receipt_id,
                pool=pool,
                day=day,
                at=now,
            )
            if not first:  # a retry: the receipt it already holds, nothing spent
                prior = await store.pool_receipt_of(conn, project, review_id)
                assert prior is not None
                if prior.status is ReceiptStatus.REFUNDED:
                    if await store.respend_pool_receipt(conn, project, review_id, pool=pool, day=day, at=now):
                        # A later release of a review whose earlier one gave its unit back spends anew.
                        if not await store.take_pool_unit(conn, pool, day, budget):
                            raise _OverBudget()
                        used = await store.pool_used(conn, pool, day)
                        return PoolSend(
                            True, prior.receipt_id, pool, used, budget, ReceiptStatus.CONSUMED.value
                        )
                    # A concurrent release spent it first: answer from what that one committed.
                    prior = await store.pool_receipt_of(conn, project, review_id)
                    assert prior is not None
                used = await store.pool_used(conn, prior.pool, prior.day)
                allowed = prior.status is not ReceiptStatus.REFUNDED
                return PoolSend(allowed, prior.receipt_id, prior.pool, used, budget, prior.status.value)
            if not await store.take_pool_unit(conn, pool, day, budget):
                raise _OverBudget()
            used = await store.pool_used(conn, pool, day)
            return PoolSend(True, receipt_id, pool, used, budget, ReceiptStatus.CONSUMED.value)
    except _OverBudget:
        async with db.engine.connect() as conn:
            used = await store.pool_used(conn, pool, utc_day(utcnow()))
        return PoolSend(False, "", pool, used, budget, "")


async def settle_pool_send(
    db: Database, budgets: PoolBudgets, principal: Principal, *, review_id: str, outcome: Outcome
) -> PoolSend:
    """Settle the review's receipt: ``sent`` keeps the unit, ``not_sent`` gives it back (once),
    ``unknown`` keeps it for good (it may have gone out). Only the receipt's project settles it."""
    review_id = _review_id(review_id)
    async with db.transaction() as uow:
        return await _settle(uow, budgets, principal.project_id, review_id, outcome)


async def _settle(
    uow: UnitOfWork, budgets: PoolBudgets, project_id: str, review_id: str, outcome: Outcome
) -> PoolSend:
    conn, now = uow.conn, utcnow()
    receipt = await store.pool_receipt_of(conn, project_id, review_id)
    if receipt is None:
        raise DomainError(Code.NOT_FOUND, f"No pool receipt for review {review_id} in this project.")
    status = settled_status(receipt.status, outcome)
    if status is not None:
        if not await store.settle_pool_receipt(conn, project_id, review_id, receipt.status, status, now):
            raise DomainError(Code.CONFLICT, "The pool receipt was settled concurrently; read it again.")
        if status is ReceiptStatus.REFUNDED:
            await store.give_back_pool_unit(conn, receipt.pool, receipt.day)
    used = await store.pool_used(conn, receipt.pool, receipt.day)
    final = status or receipt.status
    return PoolSend(
        final is not ReceiptStatus.REFUNDED,
        receipt.receipt_id,
        receipt.pool,
        used,
        budgets.of(receipt.pool),
        final.value,
    )


OUTCOMES = {
    budget_pb2.POOL_SEND_OUTCOME_SENT: Outcome.SENT,
    budget_pb2.POOL_SEND_OUTCOME_NOT_SENT: Outcome.NOT_SENT,
    budget_pb2.POOL_SEND_OUTCOME_UNKNOWN: Outcome.UNKNOWN,
}


def pool_subscriptions(budgets: PoolBudgets) -> dict[str, Subscription[Any]]:
    """review_state's settlements through its outbox: handled in the event's unit of work, once. A
    review with no receipt (released before the governor, or uncounted) and a settlement the receipt
    refuses (a refund after an unknown outcome) change nothing: they are logged, never retried."""

    async def settled(uow: UnitOfWork, event: budget_pb2.SettlePoolSendRequest) -> None:
        outcome = OUTCOMES.get(event.outcome)
        if outcome is None or not event.review_id:
            log.error("dropped a pool settlement with no outcome or review (%s)", event.review_id)
            return
        try:
            await _settle(uow, budgets, event.principal.project_id, event.review_id, outcome)
        except DomainError as refused:
            log.info("pool settlement of %s as %s: %s", event.review_id, outcome.value, refused.detail)

    return {"pool_send_settled": Subscription(budget_pb2.SettlePoolSendRequest, settled)}


async def list_send_pools(db: Database, budgets: PoolBudgets, principal: Principal) -> PoolsToday:
    """Every pool's use today against its budget: the deployment operator's view (it spans orgs)."""
    if principal.org_id != OPERATOR_ORG or principal.actor_kind not in (ActorKind.ADMIN, ActorKind.SYSTEM):
        raise DomainError(
            Code.FORBIDDEN_SCOPE,
            "The send pools span every org: reading them takes the deployment's bootstrap admin token.",
        )
    day = utc_day(utcnow())
    async with db.engine.connect() as conn:
        rows = await store.pool_days(conn, day)
    return PoolsToday(day.isoformat(), [(row, budgets.of(row.pool)) for row in rows], budgets.default)
