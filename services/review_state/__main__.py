"""Boot: ``python -m review_state``."""

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from reviewloop.diff.v1 import diff_pb2
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.rules.v1 import rules_pb2
from reviewloop.service import Job, ServiceSpec, main

from review_state import app
from review_state.app import Env
from review_state.bootstrap import build_env
from review_state.server import registrations
from review_state.store import metadata

log = logging.getLogger(__name__)


def background(env: Env) -> Sequence[Job]:
    """The delivery sweep, from boot on: attempts a dead worker left are claimed again (a try past DATA
    only by evidence), retries come due, parked attempts are recovered by Message-ID, never resent."""

    async def sweep() -> None:
        while True:
            try:
                await app.reconcile(env)
            except Exception:  # the store is briefly unreachable: keep sweeping
                log.exception("delivery sweep failed")
            await asyncio.sleep(env.settings.sweep_interval_s)

    return [sweep]


SPEC = ServiceSpec(
    name="review_state",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    bootstrap=build_env,
    servicers=registrations,
    peers=("rules", "diff", "dispatch_budget"),
    subscribers={
        "nudge": nudge_pb2.DESCRIPTOR.services_by_name["NudgeService"].full_name,
        "rules": rules_pb2.DESCRIPTOR.services_by_name["RulesService"].full_name,
        "diff": diff_pb2.DESCRIPTOR.services_by_name["DiffService"].full_name,
    },
    background=background,
)

if __name__ == "__main__":
    main(SPEC)
