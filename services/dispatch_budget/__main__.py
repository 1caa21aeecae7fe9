"""Boot: ``python -m dispatch_budget``."""

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from reviewloop.service import Job, ServiceSpec, main

from dispatch_budget import app
from dispatch_budget.env import Env, bootstrap
from dispatch_budget.server import registrations
from dispatch_budget.store import metadata

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


SPEC = ServiceSpec(
    name="dispatch_budget",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    bootstrap=lambda db, _peers: bootstrap(db),
    servicers=registrations,
    background=background,
)

if __name__ == "__main__":
    main(SPEC)
