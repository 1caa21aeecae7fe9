"""The rule high-water a new draft without a token is composed under, remembered per (org, project,
agent, category) so a submit does not ask rules every time (GetRules was ~4 ms of CPU per submit).

Only a new draft's recorded high-water comes from here: a value below the stack's is the conservative
side (the draft is marked stale when the ``rule_changed`` lands, and a tokenless redraft is
``born_stale``); a redraft's check always asks rules. Every rules event this process ingests drops
every entry and bumps the generation (rule changes are rare), so a lookup that started before the event
is not stored, and a submit whose generation moved before its insert asks again. Entries also expire
after ``ttl_s``: a replica that did not ingest the event learns the new stack within that."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Key = tuple[str, str, str, str]  # org, project, agent, category
_MAX_ENTRIES = 10_000


@dataclass
class RuleStacks:
    ttl_s: float = 5.0
    generation: int = 0
    _entries: dict[Key, tuple[int, float]] = field(default_factory=dict)

    def invalidate(self) -> None:
        """A rules event arrived: any stack may have moved."""
        self.generation += 1
        self._entries.clear()

    async def high_water(self, key: Key, fetch: Callable[[], Awaitable[int]]) -> int:
        """The cached high-water of ``key``, else ``fetch()``'s, stored unless a rules event arrived
        while it was asked."""
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        generation = self.generation
        value = await fetch()
        if self.ttl_s > 0 and generation == self.generation:
            if len(self._entries) >= _MAX_ENTRIES:
                self._entries = {k: v for k, v in self._entries.items() if v[1] > now}
            self._entries[key] = (value, now + self.ttl_s)
        return value
