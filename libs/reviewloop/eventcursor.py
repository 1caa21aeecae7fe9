"""The resume point of a drain or stream of review events.

Shared by the nudge service, which issues it, and the gateway, which fans one project's live tail out to
many streams and must place each event against each stream's position.
"""

from __future__ import annotations

from dataclasses import dataclass

# What ``str(Position)`` writes, or "" (the start): the published pattern of a cursor parameter.
PATTERN = r"^([0-9]{1,18}(\.[0-9]{1,18})?)?$"


@dataclass(frozen=True, order=True)
class Position:
    """The last review nudge and the last broadcast read, by their ``pos`` in their own queues.

    Written ``"<nudge>"`` while no broadcast was read, else ``"<nudge>.<broadcast>"``, so a cursor issued
    before broadcasts existed reads the same.
    """

    nudge: int = 0
    broadcast: int = 0

    def __str__(self) -> str:
        return f"{self.nudge}.{self.broadcast}" if self.broadcast else str(self.nudge)

    @classmethod
    def parse(cls, cursor: str) -> Position:
        """The position ``cursor`` writes ("" is the start); ``ValueError`` for anything else."""
        if not cursor:
            return cls()
        parts = [int(part) for part in cursor.split(".")]
        if len(parts) not in (1, 2) or min(parts) < 0:
            raise ValueError(f"not a cursor: {cursor!r}")
        return cls(*parts)

    def past(self, pos: int, *, broadcast: bool) -> Position:
        """The position right after the event at ``pos`` (a broadcast's, or a review nudge's)."""
        return Position(self.nudge, pos) if broadcast else Position(pos, self.broadcast)

    def covers(self, pos: int, *, broadcast: bool) -> bool:
        """Whether the event at ``pos`` lies at or before this position (already read)."""
        return pos <= (self.broadcast if broadcast else self.nudge)

    def join(self, other: Position) -> Position:
        """The later of each part."""
        return Position(max(self.nudge, other.nudge), max(self.broadcast, other.broadcast))
