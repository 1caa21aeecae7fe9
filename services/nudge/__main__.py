"""Boot: ``python -m nudge``."""

from pathlib import Path

from reviewloop.service import ServiceSpec, main

from nudge.server import servicers
from nudge.store import metadata

SPEC = ServiceSpec(
    name="nudge",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    servicers=servicers,
)

if __name__ == "__main__":
    main(SPEC)
