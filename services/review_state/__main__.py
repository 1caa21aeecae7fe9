"""Boot: ``python -m review_state``."""

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.rules.v1 import rules_pb2
from reviewloop.service import Peers, Registration, ServiceSpec, main
from reviewloop.storage import Database

from review_state import app
from review_state.bootstrap import env_for
from review_state.server import registrations
from review_state.store import metadata

log = logging.getLogger(__name__)


def servicers(db: Database, peers: Peers) -> Sequence[Registration]:
    return registrations(env_for(db, peers))


def background(db: Database, peers: Peers) -> Sequence[Callable[[], Coroutine[Any, Any, None]]]:
    """The reconciliation sweep: parked send attempts are recovered by Message-ID, never resent."""
    env = env_for(db, peers)

    async def sweep() -> None:
        while True:
            try:
                await app.reconcile(env)
            except Exception:  # the store is briefly unreachable: keep sweeping
                log.exception("reconciliation sweep failed")
            await asyncio.sleep(env.settings.sweep_interval_s)

    return [sweep]


SPEC = ServiceSpec(
    name="review_state",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    servicers=servicers,
    peers=("rules", "diff", "dispatch_budget"),
    subscribers={
        "nudge": nudge_pb2.DESCRIPTOR.services_by_name["NudgeService"].full_name,
        "rules": rules_pb2.DESCRIPTOR.services_by_name["RulesService"].full_name,
    },
    background=background,
)

if __name__ == "__main__":
    main(SPEC)
