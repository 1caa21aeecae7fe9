"""Boot: ``python -m rules``."""

from pathlib import Path

from reviewloop.service import ServiceSpec, main

from rules.server import servicers
from rules.store import metadata

SPEC = ServiceSpec(
    name="rules",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    servicers=servicers,
)

if __name__ == "__main__":
    main(SPEC)
