"""Review events (nudges) and their acks."""

from __future__ import annotations

from datetime import datetime

from pydantic import (
    Field,
    JsonValue,
)

from reviewloop.shapes._base import INT64_MAX, Shape

# --- review events (nudges) -------------------------------------------------------------------------


class ReviewEvent(Shape):
    """A nudge: an element of ``list_review_events``.

    ``reason`` is additive across 0.x: ack and ignore one you do not know.
    """

    seq: int
    id: str
    reason: str = Field(
        description=(
            "redraft_requested | feedback_added | rejected | rule_changed | recheck_category | "
            "propagate_general_rule | sent | send_failed | cancelled | front_run_next (additive)"
        )
    )
    review_id: str
    category_id: str | None = None
    payload: dict[str, JsonValue]
    created_at: datetime | None = None


class ReviewEventList(Shape):
    """``list_review_events`` (a page) and ``wait_for_review_event`` (no cursor)."""

    events: list[ReviewEvent]
    next_cursor: str | None = None


class ReviewEventAck(Shape):
    """Acknowledge a review's nudges up to ``seq``."""

    review_id: str = Field(max_length=40)
    seq: int = Field(ge=1, le=INT64_MAX)


class AckReviewEventsRequest(Shape):
    """``ack_review_events``: one cursor per review, all or nothing."""

    acks: list[ReviewEventAck] = Field(min_length=1, max_length=100)


class AckReviewEventsResult(Shape):
    """How many review cursors moved."""

    acked: int
