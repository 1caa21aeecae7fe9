"""Boot: ``python -m diff``."""

from pathlib import Path

from reviewloop.service import ServiceSpec, main

from diff.bootstrap import bootstrap
from diff.server import servicers
from diff.store import metadata

SPEC = ServiceSpec(
    name="diff",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    bootstrap=lambda db, _peers, _settings: bootstrap(db),
    servicers=servicers,
)

if __name__ == "__main__":
    main(SPEC)
