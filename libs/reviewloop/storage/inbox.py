"""The inbox: events other contexts' relays deliver here, each handled once in its own unit of work.

A redelivered ``event_id`` is counted and skipped (``schema.first_delivery``). An event of a type
this service does not subscribe to, or whose payload does not parse into the subscribed message, is
logged and still counted as received: the relay must not retry it forever.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from reviewloop.common.v1 import common_pb2
from reviewloop.storage import codec
from reviewloop.storage.engine import Database, UnitOfWork
from reviewloop.storage.schema import first_delivery

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class Subscription(Generic[M]):
    """How one event type is handled: its payload message and the handler.

    The handler runs in the event's unit of work. What it returns is passed to ``ingest_each``'s
    ``on_commit`` once that unit of work has committed.
    """

    message: type[M]
    handle: Callable[[UnitOfWork, M], Awaitable[Any]]


# Work a unit of work does before its events' handlers, e.g. taking their locks in one fixed order.
Prepare = Callable[[UnitOfWork, Sequence[common_pb2.Event]], Awaitable[None]]


@dataclass(frozen=True)
class Ingested:
    """What one ``Ingest`` call did: events handled (or refused) for the first time, and repeats."""

    accepted: int
    duplicates: int


async def ingest_each(
    db: Database,
    events: Iterable[common_pb2.Event],
    subscriptions: Mapping[str, Subscription[Any]],
    on_commit: Callable[[Any], None] | None = None,
    prepare: Prepare | None = None,
) -> Ingested:
    """Handle each event once, in order, each in its own unit of work.

    Args:
        db: this service's store, whose inbox remembers the event ids.
        events: the delivered events.
        subscriptions: event type -> how to handle it.
        on_commit: called with a handler's result once its unit of work has committed.
        prepare: run first in each unit of work with its one event (as ``ingest_batch``'s).

    Returns:
        The counts the ``Ingest`` RPC answers.
    """
    accepted = duplicates = 0
    for event in events:
        async with db.transaction() as uow:
            if prepare is not None:
                await prepare(uow, [event])
            first, result = await _handle(uow, event, subscriptions)
        accepted, duplicates = accepted + first, duplicates + (not first)
        if on_commit is not None and result is not None:
            on_commit(result)
    return Ingested(accepted, duplicates)


async def ingest_batch(
    db: Database,
    events: Iterable[common_pb2.Event],
    subscriptions: Mapping[str, Subscription[Any]],
    on_commit: Callable[[Any], None] | None = None,
    prepare: Prepare | None = None,
) -> Ingested:
    """Handle the events once, in order, all in one unit of work (``ingest_each``'s arguments).

    A relay's batch costs one transaction instead of one per event. When that unit of work fails, the
    events go again one unit of work each (``ingest_each``), so one event that fails fails alone.
    ``prepare`` runs first in the unit of work, e.g. to take the batch's locks in one fixed order.
    """
    batch = list(events)
    try:
        results = []
        accepted = 0
        async with db.transaction() as uow:
            if prepare is not None:
                await prepare(uow, batch)
            for event in batch:
                first, result = await _handle(uow, event, subscriptions)
                accepted += first
                results.append(result)
    except Exception:
        log.warning("a batch of %d events failed as one unit of work; handling them one by one", len(batch))
        return await ingest_each(db, batch, subscriptions, on_commit, prepare)
    if on_commit is not None:
        for result in results:
            if result is not None:
                on_commit(result)
    return Ingested(accepted, len(batch) - accepted)


async def _handle(
    uow: UnitOfWork, event: common_pb2.Event, subscriptions: Mapping[str, Subscription[Any]]
) -> tuple[bool, Any]:
    """Handle one event in ``uow``: whether it was its first delivery, and its handler's result."""
    if not await first_delivery(uow.conn, event.event_id):
        return False, None
    subscription = subscriptions.get(event.type)
    if subscription is None:
        log.info("ignored event type %s (%s)", event.type, event.event_id)
        return True, None
    try:
        message = codec.decode(event.payload, subscription.message)
    except json_format.ParseError as exc:
        log.error("dropped an unreadable %s event (%s): %s", event.type, event.event_id, exc)
        return True, None
    return True, await subscription.handle(uow, message)
