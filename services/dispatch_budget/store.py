"""The store's schema; the outbox and inbox tables come with every store."""

from reviewloop.storage.schema import new_metadata

metadata = new_metadata()
