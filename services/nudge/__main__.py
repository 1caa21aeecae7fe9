"""Boot: ``python -m nudge``. The composition root: the only place that reads the environment.

Beside the server it runs the PostgreSQL listener that wakes long-polls for nudges any replica
commits, and the retention sweep. ``REVIEWLOOP_NUDGE_RETENTION_S`` is the age after which an acked
nudge is compacted (default 7 days; un-acked nudges are never dropped),
``REVIEWLOOP_NUDGE_COMPACT_EVERY_S`` how often the sweep runs (default 60 s).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

from reviewloop.config import ServiceConfig
from reviewloop.service import Job, ServiceSpec, main
from reviewloop.storage import Database

from nudge import app, server, wakeup
from nudge.store import metadata


def settings_from(environ: Mapping[str, str]) -> app.Settings:
    defaults = app.Settings()
    retention_s = environ.get("REVIEWLOOP_NUDGE_RETENTION_S", defaults.retention.total_seconds())
    return app.Settings(
        retention=timedelta(seconds=float(retention_s)),
        compact_every_s=float(environ.get("REVIEWLOOP_NUDGE_COMPACT_EVERY_S", defaults.compact_every_s)),
        # The shared outbox retention, read without the rest of ServiceConfig (which needs the address).
        inbox_retention=timedelta(
            seconds=float(environ.get("REVIEWLOOP_OUTBOX_RETENTION_S", ServiceConfig.outbox_retention_s))
        ),
    )


def bootstrap(db: Database, environ: Mapping[str, str] = os.environ) -> app.Env:
    """The production wiring of one process."""
    return app.Env(db, settings_from(environ))


def background(env: app.Env) -> Sequence[Job]:

    async def sweep() -> None:
        await app.sweep_forever(env)

    async def listen() -> None:
        await wakeup.listen(env.db)

    return (listen, sweep)


SPEC = ServiceSpec(
    name="nudge",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    bootstrap=lambda db, _peers: bootstrap(db),
    servicers=server.servicers,
    background=background,
)

if __name__ == "__main__":
    main(SPEC)
