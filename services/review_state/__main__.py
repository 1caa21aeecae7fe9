"""Boot: ``python -m review_state``."""

from pathlib import Path

from reviewloop.service import ServiceSpec, main

from review_state.server import servicers
from review_state.store import metadata

SPEC = ServiceSpec(
    name="review_state",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    servicers=servicers,
    subscribers=("nudge",),
)

if __name__ == "__main__":
    main(SPEC)
