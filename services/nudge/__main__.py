"""Boot: ``python -m nudge``.

Beside the server it runs the PostgreSQL listener that wakes long-polls for nudges any replica
commits, and the retention sweep. ``REVIEWLOOP_NUDGE_RETENTION_S`` is the age after which an acked
nudge is compacted (default 7 days; un-acked nudges are never dropped),
``REVIEWLOOP_NUDGE_COMPACT_EVERY_S`` how often the sweep runs (default 60 s).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from reviewloop.config import ServiceConfig
from reviewloop.service import Peers, ServiceSpec, main
from reviewloop.storage import Database

from nudge import app, wakeup
from nudge.server import servicers
from nudge.store import metadata

DEFAULT_RETENTION_S = 7 * 24 * 3600.0
DEFAULT_COMPACT_EVERY_S = 60.0


def background(db: Database, peers: Peers) -> Sequence[Callable[[], Coroutine[Any, Any, None]]]:
    retention = timedelta(seconds=float(os.environ.get("REVIEWLOOP_NUDGE_RETENTION_S", DEFAULT_RETENTION_S)))
    every_s = float(os.environ.get("REVIEWLOOP_NUDGE_COMPACT_EVERY_S", DEFAULT_COMPACT_EVERY_S))
    # Received event ids are kept as long as the shared outbox retention, like every other inbox.
    inbox_retention = timedelta(seconds=ServiceConfig.from_env("nudge").outbox_retention_s)

    async def sweep() -> None:
        await app.sweep_forever(db, every_s=every_s, retention=retention, inbox_retention=inbox_retention)

    async def listen() -> None:
        await wakeup.listen(db)

    return (listen, sweep)


SPEC = ServiceSpec(
    name="nudge",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    servicers=servicers,
    background=background,
)

if __name__ == "__main__":
    main(SPEC)
