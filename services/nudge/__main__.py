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
from reviewloop.metrics import Point, Probe
from reviewloop.service import Job, ServiceSpec, main
from reviewloop.storage import Database, utcnow
from reviewloop.storage.outbox import as_utc
from sqlalchemy import func, select

from nudge import app, server, store, wakeup
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


def probes(env: app.Env) -> Sequence[Probe]:
    """The un-acked backlog and the oldest un-acked nudge's age, per project."""

    async def backlog() -> Mapping[str, Sequence[Point]]:
        query = (
            select(store.unacked.c.project_id, func.count(), func.min(store.nudges.c.created_at))
            .join(store.nudges, store.nudges.c.pos == store.unacked.c.pos)
            .group_by(store.unacked.c.project_id)
        )
        async with env.db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        now = utcnow()
        return {
            "reviewloop.nudge.backlog": [(float(n), {"project_id": p}) for p, n, _ in rows],
            "reviewloop.nudge.oldest_unacked_age": [
                ((now - as_utc(oldest)).total_seconds(), {"project_id": p}) for p, _, oldest in rows
            ],
        }

    return [backlog]


SPEC = ServiceSpec(
    name="nudge",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    bootstrap=lambda db, _peers: bootstrap(db),
    servicers=server.servicers,
    background=background,
    probes=probes,
)

if __name__ == "__main__":
    main(SPEC)
