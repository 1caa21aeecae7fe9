"""Boot: ``python -m rules``."""

from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from reviewloop.review.v1 import review_pb2
from reviewloop.service import Peers, Registration, ServiceSpec, main
from reviewloop.storage import Database

from rules import server
from rules.app import ensure_token_key
from rules.bootstrap import bootstrap
from rules.store import metadata


def servicers(db: Database, peers: Peers) -> Sequence[Registration]:
    return server.servicers(bootstrap(db))


def background(db: Database, peers: Peers) -> Sequence[Callable[[], Coroutine[Any, Any, None]]]:
    # The composition-token signing key is generated at first boot (and kept in the store).
    return [lambda: ensure_token_key(db)]


SPEC = ServiceSpec(
    name="rules",
    metadata=metadata,
    migrations_dir=Path(__file__).parent / "migrations",
    servicers=servicers,
    subscribers={"review_state": review_pb2.DESCRIPTOR.services_by_name["ReviewStateService"].full_name},
    background=background,
)

if __name__ == "__main__":
    main(SPEC)
