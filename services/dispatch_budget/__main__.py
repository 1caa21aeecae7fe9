"""Boot: ``python -m dispatch_budget``."""

import asyncio
import logging
from collections.abc import Mapping, Sequence

from reviewloop.metrics import Point, Probe
from reviewloop.service import Job, ServiceSpec, main
from reviewloop.storage import utcnow
from sqlalchemy import func, select

from dispatch_budget import app, store
from dispatch_budget.bootstrap import DispatchBudgetEnvironment, Env, bootstrap, settings_from
from dispatch_budget.domain.autosend import utc_day
from dispatch_budget.server import registrations
from dispatch_budget.store import tables

log = logging.getLogger(__name__)


def background(env: Env) -> Sequence[Job]:
    """The timeout sweep: a review in flight past timeoutMinutes ends even if its session never calls
    again (every replica sweeps; each review ends once)."""

    async def sweep() -> None:
        while True:
            try:
                await app.end_overdue_reviews(env.db, env.gate)
            except Exception:  # the store is briefly unreachable: keep sweeping
                log.exception("timeout sweep failed")
            await asyncio.sleep(env.settings.sweep_interval_s)

    return [sweep]


def probes(env: Env) -> Sequence[Probe]:
    """Admissions by outcome (unsettled until settled), launch refusals, gate decisions by source."""

    async def budget() -> Mapping[str, Sequence[Point]]:
        async with env.db.engine.connect() as conn:
            outcomes = (
                await conn.execute(
                    select(tables.admissions.c.outcome, func.count()).group_by(tables.admissions.c.outcome)
                )
            ).all()
            refusals = (
                await conn.execute(select(func.count()).select_from(tables.launch_refusals))
            ).scalar_one()
            source = tables.gate_decisions.c.record["source"].as_string()
            decisions = (await conn.execute(select(source, func.count()).group_by(source))).all()
            pools = await store.pool_days(conn, utc_day(utcnow()))
        return {
            "reviewloop.budget.admissions": [(float(n), {"outcome": o or "unsettled"}) for o, n in outcomes],
            "reviewloop.budget.launch_refusals": [(float(refusals), {})],
            "reviewloop.budget.gate_decisions": [
                (float(n), {"source": src or "unknown"}) for src, n in decisions
            ],
            # The shared-pool governor, per sending domain today: units in use against the budget.
            "reviewloop.budget.send_pool.used": [(float(p.used), {"pool": p.pool}) for p in pools],
            "reviewloop.budget.send_pool.budget": [
                (float(env.settings.pool_budgets.of(p.pool)), {"pool": p.pool}) for p in pools
            ],
            "reviewloop.budget.send_pool.refunded": [(float(p.refunded), {"pool": p.pool}) for p in pools],
            "reviewloop.budget.send_pool.kept": [(float(p.kept), {"pool": p.pool}) for p in pools],
        }

    return [budget]


SPEC = ServiceSpec.of(
    __package__,
    settings=DispatchBudgetEnvironment,
    bootstrap=lambda db, _peers, read: bootstrap(db, settings_from(read)),
    servicers=registrations,
    background=background,
    probes=probes,
)

if __name__ == "__main__":
    main(SPEC)
