"""Boot: ``python -m dispatch_budget``."""

from pathlib import Path

from reviewloop.service import ServiceSpec, main

from dispatch_budget.env import bootstrap
from dispatch_budget.server import registrations
from dispatch_budget.store import metadata

SPEC = ServiceSpec(
    name="dispatch_budget",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    bootstrap=lambda db, _peers: bootstrap(db),
    servicers=registrations,
)

if __name__ == "__main__":
    main(SPEC)
