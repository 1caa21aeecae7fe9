"""Boot: ``python -m review_state``."""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from reviewloop.budget.v1 import budget_pb2
from reviewloop.diff.v1 import diff_pb2
from reviewloop.metrics import Point, Probe
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.rules.v1 import rules_pb2
from reviewloop.service import Job, ServiceSpec, main
from reviewloop.storage import utcnow
from reviewloop.storage.outbox import as_utc
from sqlalchemy import func, select

from review_state import app, store
from review_state.app import Env, pacing
from review_state.app.notify import mail_subscribers
from review_state.bootstrap import ReviewStateEnvironment, build_env
from review_state.server import registrations
from review_state.store import tables

log = logging.getLogger(__name__)


def background(env: Env) -> Sequence[Job]:
    """The sweeps any replica runs from boot on, each step once across replicas (claims and CAS):
    delivery (attempts a dead worker left are claimed again, a try past DATA only by evidence, retries
    come due, parked attempts are recovered by Message-ID, never resent), the review-deadline breaker, and
    the pacing windows the minimum interval (or a crash) left short."""

    def forever(step: Callable[[Env], Awaitable[object]], interval_s: float, what: str) -> Job:
        async def loop() -> None:
            while True:
                try:
                    await step(env)
                except Exception:  # the store is briefly unreachable: keep sweeping
                    log.exception("%s sweep failed", what)
                await asyncio.sleep(interval_s)

        return loop

    return [
        forever(app.reconcile, env.settings.sweep_interval_s, "delivery"),
        forever(app.sweep_review_deadlines, env.settings.sweep_interval_s, "review-deadline"),
        forever(pacing.sweep, env.settings.pacing_sweep_interval_s, "pacing"),
    ]


def probes(env: Env) -> Sequence[Probe]:
    """Deliveries by outcome, and the sends parked for reconciliation with the oldest one's age."""
    attempts = tables.delivery_attempts

    async def delivery() -> Mapping[str, Sequence[Point]]:
        async with env.db.engine.connect() as conn:
            by_status = (
                await conn.execute(select(attempts.c.status, func.count()).group_by(attempts.c.status))
            ).all()
            parked, oldest = (
                await conn.execute(
                    select(func.count(), func.min(attempts.c.parked_at)).where(
                        attempts.c.status == "in_flight", attempts.c.stage == store.PARKED
                    )
                )
            ).one()
        return {
            "reviewloop.delivery.attempts": [(float(n), {"outcome": status}) for status, n in by_status],
            "reviewloop.delivery.parked": [(float(parked), {})],
            "reviewloop.delivery.parked_oldest_age": [
                ((utcnow() - as_utc(oldest)).total_seconds() if oldest else 0.0, {})
            ],
        }

    return [delivery]


SPEC = ServiceSpec.of(
    __package__,
    settings=ReviewStateEnvironment,
    bootstrap=build_env,
    servicers=registrations,
    peers=("rules", "diff", "dispatch_budget"),
    subscribers={
        "nudge": nudge_pb2.DESCRIPTOR.services_by_name["NudgeService"].full_name,
        "rules": rules_pb2.DESCRIPTOR.services_by_name["RulesService"].full_name,
        "diff": diff_pb2.DESCRIPTOR.services_by_name["DiffService"].full_name,
        "dispatch_budget": budget_pb2.DESCRIPTOR.services_by_name["DispatchBudgetService"].full_name,
    },
    local_subscribers=mail_subscribers,
    background=background,
    probes=probes,
)

if __name__ == "__main__":
    main(SPEC)
