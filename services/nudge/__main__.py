"""Boot: ``python -m nudge``. ``nudge.bootstrap`` wires the ``Env`` from the settings; this adds
the background jobs and the probes: the PostgreSQL listener that wakes long-polls for nudges any replica
commits, the retention sweep, and the webhook sender's delivery loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reviewloop.metrics import Point, Probe
from reviewloop.service import Job, ServiceSpec, main
from reviewloop.storage import utcnow
from reviewloop.storage.outbox import as_utc
from sqlalchemy import func, select

from nudge import app, server, store, wakeup
from nudge.bootstrap import NudgeEnvironment, bootstrap


def background(env: app.Env) -> Sequence[Job]:

    async def sweep() -> None:
        await app.sweep_forever(env)

    async def listen() -> None:
        await wakeup.listen(env.db)

    async def deliver() -> None:
        await app.webhooks.deliver_forever(env.db, env.settings.webhooks)

    return (listen, sweep, deliver)


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


SPEC = ServiceSpec.of(
    __package__,
    settings=NudgeEnvironment,
    bootstrap=lambda db, _peers, read: bootstrap(db, read),
    servicers=server.servicers,
    background=background,
    probes=probes,
)

if __name__ == "__main__":
    main(SPEC)
