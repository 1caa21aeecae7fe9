"""Storage: engines and their driver path, units of work, migrations, the outbox and its relay."""

from reviewloop.storage import fastpaths
from reviewloop.storage.engine import Database, UnitOfWork, make_engine
from reviewloop.storage.schema import first_delivery, new_metadata, utcnow

__all__ = ["Database", "UnitOfWork", "fastpaths", "first_delivery", "make_engine", "new_metadata", "utcnow"]
