"""Boot: ``python -m dispatch_budget``."""

from collections.abc import Sequence
from pathlib import Path

from reviewloop.service import Peers, Registration, ServiceSpec, main
from reviewloop.storage import Database

from dispatch_budget.env import bootstrap
from dispatch_budget.server import registrations
from dispatch_budget.store import metadata


def servicers(db: Database, peers: Peers) -> Sequence[Registration]:
    """The service's wiring, built once per process from its environment (``env.bootstrap``)."""
    return registrations(bootstrap(db))


SPEC = ServiceSpec(
    name="dispatch_budget",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    servicers=servicers,
)

if __name__ == "__main__":
    main(SPEC)
