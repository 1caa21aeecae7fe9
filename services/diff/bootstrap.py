"""The composition root. diff reads nothing from the environment and calls no peer: the ``Env`` its
servicer runs with is the store itself."""

from __future__ import annotations

from reviewloop.storage import Database


def bootstrap(db: Database) -> Database:
    """The service's wiring: the store ``db``, as it is."""
    return db
