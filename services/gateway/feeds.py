"""One shared read per project for every open event stream of that project in this gateway (issue 19).

A stream holding its own Subscribe made every publish cost one store read per open stream. Instead a
project's streams share a ``ProjectFeed``: one live-tail Subscribe (``from_head``) to the nudge service,
whose events are fanned out in-process to each stream's queue, filtered by what the stream's key may see.

A stream joins the feed first, then reads its own backlog (ListEvents after its ``Last-Event-ID``) to the
end, and only then takes from its queue what lies past both its backlog and the feed's position at the
join: whatever the feed had read by then was committed before the backlog read saw it, and whatever it
reads later is queued. So there is no gap and no repeat.

Open streams are capped on each gateway (issue 36: one key opened 400 and held 400 descriptors). Past
its key's cap, a new stream closes that key's stream idle longest (the one that sent nothing for the
longest time): a client whose connection died unseen (a NAT dropped it, a laptop slept) reconnects at
once instead of waiting out its own ghost, and a key can only ever displace its own streams. Past its
project's cap, a new stream is refused ``429 rate_limited`` with Retry-After: closing the oldest there
would let one key of a project close another key's streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
from reviewloop.errors import Code, DomainError
from reviewloop.eventcursor import Position
from reviewloop.metrics import Point
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.tenancy import ActorKind, Principal

from gateway.backends import Backends

log = logging.getLogger(__name__)

# A stream that falls this far behind its feed is closed; its client resumes with Last-Event-ID.
QUEUE_MAX = 1000
# The principal of a project's shared read: it sees every nudge of the project, and (having acked none)
# every broadcast; each stream then keeps what its own key may see.
FEED_ACTOR = "gateway-feed"
# What a stream refused at its project's cap is told to wait before it tries again.
STREAM_RETRY_AFTER_S = 5


class FeedEnded(Exception):
    """The shared read stopped (the nudge service went away) or the stream fell behind: reconnect."""


def is_broadcast(nudge: nudge_pb2.Nudge) -> bool:
    return not nudge.review_id


def visible(principal: Principal, nudge: nudge_pb2.Nudge) -> bool:
    """What the nudge service would show this key: an agent its own reviews' nudges and the broadcasts
    naming it or no agent; other keys everything of their project."""
    if principal.actor_kind is not ActorKind.AGENT:
        return True
    return nudge.agent_id == principal.actor_id or (is_broadcast(nudge) and not nudge.agent_id)


@dataclass(eq=False)
class Listener:
    """One stream's share of its project's feed."""

    principal: Principal
    key_id: str = ""
    queue: asyncio.Queue[nudge_pb2.Nudge | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_MAX))
    # When the stream last sent an event (or opened): the idlest of a key's streams is closed first.
    active_at: float = field(default_factory=time.monotonic)
    evicted: bool = False

    def sent(self) -> None:
        self.active_at = time.monotonic()

    def evict(self) -> None:
        """Close this stream: a newer stream of its key took its place."""
        self.evicted = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)

    def offer(self, nudge: nudge_pb2.Nudge | None) -> None:
        """Queue a nudge this key may see (None: the feed ended). A full queue ends the stream."""
        if nudge is not None and not visible(self.principal, nudge):
            return
        try:
            self.queue.put_nowait(nudge)
        except asyncio.QueueFull:  # drop the backlog and say "ended": nothing is lost, the client resumes
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)

    async def next(self) -> nudge_pb2.Nudge:
        nudge = await self.queue.get()
        if nudge is None:
            raise FeedEnded
        return nudge


class ProjectFeed:
    """The live tail of one project, read once and handed to every listener."""

    def __init__(self, backends: Backends, org_id: str, project_id: str) -> None:
        self.listeners: set[Listener] = set()
        self.position: Position | None = None
        self.ready = asyncio.Event()
        self.ended = False
        principal = Principal(org_id, project_id, ActorKind.SYSTEM, FEED_ACTOR)
        self._call = backends.nudge.Subscribe(
            nudge_pb2.SubscribeRequest(principal=principal.to_proto(), from_head=True)
        )
        self._task = asyncio.create_task(self._run(), name=f"event-feed-{project_id}")

    async def _run(self) -> None:
        try:
            async for item in self._call:
                if item.HasField("nudge"):
                    # Listeners are offered the event in the same step the position moves past it.
                    for listener in self.listeners:
                        listener.offer(item.nudge)
                self.position = Position.parse(item.cursor)
                self.ready.set()
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.CANCELLED:
                log.warning("a project's event feed stopped: %s", exc.code().name)
        finally:
            self.ended = True
            self.ready.set()
            for listener in self.listeners:
                listener.offer(None)

    async def close(self) -> None:
        self._call.cancel()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


K = TypeVar("K")


def _discard(registry: dict[K, list[Listener]], key: K, listener: Listener) -> None:
    held = registry.get(key, [])
    if listener in held:
        held.remove(listener)
    if not held:
        registry.pop(key, None)


class Feeds:
    """This gateway's project feeds, opened by the first stream of a project, closed with its last."""

    def __init__(self, backends: Backends, per_key: int = 0, per_project: int = 0) -> None:
        self.backends = backends
        self.per_key, self.per_project = per_key, per_project  # 0: no cap
        self._feeds: dict[tuple[str, str], ProjectFeed] = {}
        # Every admitted stream, by key and by project, until it ends.
        self._by_key: dict[str, list[Listener]] = {}
        self._by_project: dict[tuple[str, str], list[Listener]] = {}

    def admit(self, principal: Principal, key_id: str) -> Listener:
        """A place for a new stream of ``key_id``, before it answers: past the key's cap the key's stream
        idle longest is closed; past the project's cap the stream is refused ``429 rate_limited``."""
        project = (principal.org_id, principal.project_id)
        mine = self._by_key.get(key_id, [])
        if self.per_key and len(mine) >= self.per_key:
            for idlest in sorted(mine, key=lambda listener: listener.active_at)[
                : len(mine) - self.per_key + 1
            ]:
                idlest.evict()
                self.release(idlest)
        others = self._by_project.get(project, [])
        if self.per_project and len(others) >= self.per_project:
            raise DomainError(
                Code.RATE_LIMITED,
                f"This project already holds {self.per_project} open event streams on this gateway "
                f"(REVIEWLOOP_STREAMS_PER_PROJECT); close one, or retry after {STREAM_RETRY_AFTER_S} s.",
                hints=(("retry_after", str(STREAM_RETRY_AFTER_S)),),
            )
        listener = Listener(principal, key_id)
        self._by_key.setdefault(key_id, []).append(listener)
        self._by_project.setdefault(project, []).append(listener)
        return listener

    def release(self, listener: Listener) -> None:
        """The stream ended (or was evicted): its place is free. Idempotent."""
        _discard(self._by_key, listener.key_id, listener)
        _discard(self._by_project, (listener.principal.org_id, listener.principal.project_id), listener)

    async def probe(self) -> Mapping[str, Sequence[Point]]:
        """The gauges of ``/metrics``: open streams, and the shared reads they cost (one per project)."""
        streams = sum(len(feed.listeners) for feed in self._feeds.values())
        return {
            "reviewloop.gateway.event_streams": [(float(streams), {})],
            "reviewloop.gateway.event_feeds": [(float(len(self._feeds)), {})],
        }

    @contextlib.asynccontextmanager
    async def join(self, listener: Listener) -> AsyncIterator[Position]:
        """Put an admitted listener on its project's feed, and answer the feed's position when it joined:
        the stream skips queued events at or before it (its backlog read covers them). Its place is
        released when it leaves."""
        principal = listener.principal
        key = (principal.org_id, principal.project_id)
        feed = self._feeds.get(key)
        if feed is None or feed.ended:
            feed = self._feeds[key] = ProjectFeed(self.backends, *key)
        feed.listeners.add(listener)
        try:
            await feed.ready.wait()
            if feed.ended or feed.position is None or listener.evicted:
                raise FeedEnded
            yield feed.position
        finally:
            self.release(listener)
            feed.listeners.discard(listener)
            if not feed.listeners:
                if self._feeds.get(key) is feed:
                    del self._feeds[key]
                await feed.close()

    async def close(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            await feed.close()
