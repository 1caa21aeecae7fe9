"""Review events (nudges) and their acks."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import (
    AliasChoices,
    Field,
    JsonValue,
)

from reviewloop.protoconv import oneof_names
from reviewloop.review.v1 import events_pb2
from reviewloop.shapes._base import INT64_MAX, Shape

# The nudge reasons, in the contract's words: the payloads NudgeRequested's oneof carries.
NUDGE_REASONS = oneof_names(events_pb2.NudgeRequested.DESCRIPTOR, "payload")

# --- review events (nudges) -------------------------------------------------------------------------


class ReviewEvent(Shape):
    """A nudge: an element of ``list_review_events``.

    ``reason`` is additive across 0.x: ack and ignore one you do not know. A broadcast (a project-wide
    change: ``rule_changed``, ``recheck_category``) has ``seq`` 0 and no ``review_id``; ack it by ``id``
    in ``broadcast_ids``.
    """

    seq: int = Field(description="the review's ordinal; 0 on a broadcast")
    id: str
    reason: str = Field(description=" | ".join(NUDGE_REASONS) + " (additive)")
    review_id: str | None = Field(default=None, description="absent on a broadcast nudge (seq 0)")
    category_id: str | None = None
    payload: dict[str, JsonValue] | None = None
    created_at: datetime | None = Field(
        default=None, description="always sent (the SDK requires it); the spec's examples omit it"
    )


class ReviewEventCursor(Shape):
    """A review's ack frontier: its nudges up to ``last_acked_seq`` are acknowledged."""

    review_id: str
    last_acked_seq: int


class ReviewEventsResult(Shape):
    """``list_review_events`` (a page) and ``wait_for_review_event`` (no cursor).

    The SDK's ``ReviewEventsResult``.
    """

    events: list[ReviewEvent]
    next_cursor: str | None = None
    cursors: list[ReviewEventCursor] | None = None


class AckReviewEventEntry(Shape):
    """Acknowledge a review's nudges up to ``through_seq`` (the SDK's name; ``seq`` is the spec's)."""

    review_id: str = Field(max_length=40)
    seq: int = Field(ge=1, le=INT64_MAX, validation_alias=AliasChoices("through_seq", "seq"))


class AckReviewEventRequest(Shape):
    """``ack_review_event``: one cursor per review, and broadcasts by id; all or nothing.

    ``broadcast_ids`` names the broadcasts (``seq`` 0) the caller is done with.
    """

    acks: list[AckReviewEventEntry] = Field(default_factory=list, max_length=100)
    broadcast_ids: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(
        default_factory=list, max_length=100
    )


class AckReviewEventResult(Shape):
    """What an ack took, and where each acked review's cursor now stands.

    ``acked`` counts the acks and broadcast ids taken.
    """

    acked: int
    cursors: list[ReviewEventCursor] | None = None
