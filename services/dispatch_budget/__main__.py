"""Boot: ``python -m dispatch_budget``."""

from collections.abc import Mapping, Sequence
from pathlib import Path

from reviewloop.metrics import Point, Probe
from reviewloop.service import ServiceSpec, main
from sqlalchemy import func, select

from dispatch_budget.env import Env, bootstrap
from dispatch_budget.server import registrations
from dispatch_budget.store import metadata, tables


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
        return {
            "reviewloop.budget.admissions": [(float(n), {"outcome": o or "unsettled"}) for o, n in outcomes],
            "reviewloop.budget.launch_refusals": [(float(refusals), {})],
            "reviewloop.budget.gate_decisions": [
                (float(n), {"source": src or "unknown"}) for src, n in decisions
            ],
        }

    return [budget]


SPEC = ServiceSpec(
    name="dispatch_budget",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    bootstrap=lambda db, _peers: bootstrap(db),
    servicers=registrations,
    probes=probes,
)

if __name__ == "__main__":
    main(SPEC)
