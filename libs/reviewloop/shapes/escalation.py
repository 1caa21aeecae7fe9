"""Escalation shapes (issue 38): whom a reviewer escalates a draft to, by when, and how a review reads it."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from reviewloop.shapes._base import Shape


class EscalationTarget(Shape):
    """A person (a human or admin key of the project, by its key id) or a role of the project."""

    kind: Literal["person", "role"]
    id: str = Field(
        min_length=1,
        max_length=40,
        description="person: the key id (key_...); role: human (reviewers) | admin",
    )
    name: str | None = Field(default=None, description="answered: the key's name, or the role's")


class ReviewEscalation(Shape):
    """Whom a reviewer escalated the draft to, and by when.

    It stands until a human approves, edits or rejects the draft (a redraft keeps it).
    """

    escalated_to: EscalationTarget | None = Field(description="null: escalated to no one in particular")
    deadline: datetime | None = None
    overdue: bool = Field(description="the deadline has passed")
    escalated_at: datetime
    escalated_by: str = Field(description="who escalated it: a human's key id, a review agent's id")
