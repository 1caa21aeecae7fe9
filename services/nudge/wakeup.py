"""Waking long-polls and streams when a nudge becomes visible, on any replica.

Each process has one ``Doorbell`` per store. On PostgreSQL a connection dedicated to listening
(``LISTEN reviewloop_nudge``) rings it for every committed nudge, whichever replica wrote it; on
SQLite (one process by design) the ingest rings it in-process after commit. Waiters re-read the store
when rung, and also every ``RECHECK_S`` in case a notification was lost with a dropped connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import asyncpg
from reviewloop.storage import Database

from nudge.store import NOTIFY_CHANNEL

log = logging.getLogger(__name__)

RECHECK_S = 5.0
# The webhook sender's "project": rung after a commit that queued webhook deliveries.
SENDER = "*webhooks"
RECONNECT_S = 1.0
# The project an org-wide broadcast is rung for.
ORG_WIDE = ""


class Doorbell:
    """Per-project wake-ups: ``ring(project_id)`` sets the event of every waiter on that project."""

    def __init__(self) -> None:
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        # Set while the PostgreSQL listener is connected (tests and health wait on it).
        self.listening = asyncio.Event()

    def ring(self, project_id: str) -> None:
        if project_id == ORG_WIDE:  # a broadcast to every project of an org: wake every project here
            self.ring_all()
            return
        for event in self._waiters.get(project_id, ()):
            event.set()

    def waiting(self, project_id: str) -> int:
        """How many waiters are parked on ``project_id``."""
        return len(self._waiters.get(project_id, ()))

    def ring_all(self) -> None:
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    @contextlib.contextmanager
    def waiter(self, project_id: str) -> Iterator[asyncio.Event]:
        """An event rung for ``project_id``; register before reading, so no ring is lost between."""
        event = asyncio.Event()
        self._waiters[project_id].add(event)
        try:
            yield event
        finally:
            waiters = self._waiters[project_id]
            waiters.discard(event)
            if not waiters:
                del self._waiters[project_id]


_DOORBELLS: weakref.WeakKeyDictionary[Database, Doorbell] = weakref.WeakKeyDictionary()


def doorbell(db: Database) -> Doorbell:
    """The doorbell of ``db`` in this process."""
    bell = _DOORBELLS.get(db)
    if bell is None:
        bell = _DOORBELLS[db] = Doorbell()
    return bell


async def listen(db: Database) -> None:
    """Ring ``db``'s doorbell for every nudge committed by any replica (PostgreSQL; returns at once
    on SQLite). Reconnects on its own; rings every waiter after a (re)connect, since a nudge may have
    been committed while no one was listening."""
    if db.is_sqlite:
        return
    bell = doorbell(db)
    dsn = db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    def on_notify(_conn: Any, _pid: int, _channel: str, project_id: str) -> None:
        bell.ring(project_id)

    while True:
        try:
            await _listen_once(dsn, bell, on_notify)
            log.warning("nudge listener lost its connection; reconnecting")
        except Exception as exc:  # whatever broke, keep listening: waiters depend on it
            log.warning("nudge listener cannot listen: %r", exc)
        await asyncio.sleep(RECONNECT_S)


async def _listen_once(dsn: str, bell: Doorbell, on_notify: Any) -> None:
    """Listen on one connection until it is lost."""
    lost = asyncio.Event()
    conn = await asyncpg.connect(dsn)
    try:
        conn.add_termination_listener(lambda _conn: lost.set())
        await conn.add_listener(NOTIFY_CHANNEL, on_notify)
        bell.listening.set()
        bell.ring_all()
        await lost.wait()
    finally:
        bell.listening.clear()
        if not conn.is_closed():
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)
