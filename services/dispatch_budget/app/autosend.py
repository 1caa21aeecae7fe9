"""Use cases of the daily auto-send caps."""

from __future__ import annotations

from dataclasses import dataclass

from reviewloop.storage import Database, utcnow
from reviewloop.tenancy import Principal

from dispatch_budget import store
from dispatch_budget.domain.autosend import utc_day, validate_consume


@dataclass(frozen=True)
class AutoSend:
    allowed: bool
    used_today: int
    cap_per_day: int


class _OverCap(Exception):
    """Rolls back the spend row of a held send."""


async def consume_auto_send(
    db: Database, principal: Principal, *, category_id: str, review_id: str, cap_per_day: int
) -> AutoSend:
    """Spend one unit of the category's cap for today (UTC), atomically and once per review.
    Over the cap the answer is ``allowed = False`` and nothing is spent: the caller holds the send."""
    validate_consume(category_id, review_id, cap_per_day)
    project = principal.project_id
    try:
        async with db.transaction() as uow:
            conn = uow.conn
            now = utcnow()
            day = utc_day(now)
            first = await store.remember_auto_send_spend(
                conn, project, review_id=review_id, category_id=category_id, day=day, at=now
            )
            if not first:  # a retry: report the day it was spent on, spend nothing
                prior = await store.auto_send_spend_of(conn, project, review_id)
                used = await store.auto_send_used(conn, project, prior.category_id, prior.day)
                return AutoSend(True, used, cap_per_day)
            if not await store.spend_auto_send(conn, project, category_id, day, cap_per_day):
                raise _OverCap()
            return AutoSend(True, await store.auto_send_used(conn, project, category_id, day), cap_per_day)
    except _OverCap:
        async with db.engine.connect() as conn:
            used = await store.auto_send_used(conn, project, category_id, utc_day(utcnow()))
        return AutoSend(False, used, cap_per_day)
