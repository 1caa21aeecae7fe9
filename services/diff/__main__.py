"""Boot: ``python -m diff``."""

from reviewloop.service import ServiceSpec, main

from diff.bootstrap import bootstrap
from diff.server import servicers

SPEC = ServiceSpec.of(
    __package__,
    bootstrap=lambda db, _peers, _settings: bootstrap(db),
    servicers=servicers,
)

if __name__ == "__main__":
    main(SPEC)
