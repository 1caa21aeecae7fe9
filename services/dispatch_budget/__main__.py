"""Boot: ``python -m dispatch_budget``."""

from pathlib import Path

from reviewloop.service import ServiceSpec, main

from dispatch_budget.server import servicers
from dispatch_budget.store import metadata

SPEC = ServiceSpec(
    name="dispatch_budget",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    servicers=servicers,
)

if __name__ == "__main__":
    main(SPEC)
