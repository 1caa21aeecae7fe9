"""The review aggregate: one outbound message under review, and the turns of its thread.

A ``Review`` is immutable: a transition is a compare-and-set that yields the next one (``version`` + 1),
and an ``Edge`` records which move of the transition table produced it, which is what decides the
nudge the move emits (``machine.NUDGES``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from review_state.domain.machine import NUDGES, Actor, Reason, State, Verb
from review_state.domain.submission import Attachment


@dataclass(frozen=True)
class Review:
    id: str
    org_id: str
    project_id: str
    agent_id: str
    category_id: str
    kind: str  # send | reply | forward
    state: State
    revision: int  # the composer's drafts
    version: int  # every mutation of the row
    to: list[str]
    cc: list[str]
    bcc: list[str]
    subject: str
    body_text: str
    intent: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    body_html: str | None = None
    reply_to: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()
    from_address: str = ""
    confidence: float | None = None
    rule_high_water: int = 0
    parent_message_id: str | None = None
    in_reply_to: str | None = None
    references_hdr: str | None = None
    message_id: str | None = None
    rfc_message_id: str | None = None
    thread_ref: str | None = None
    send_path: str | None = None  # human_reviewed | reviewer_approved | graduated_auto | agent_direct
    send_error: str | None = None
    gate_outcome: str | None = None
    reviewer_hops: int = 0
    decided_at: datetime | None = None
    sent_at: datetime | None = None

    @property
    def recipients(self) -> list[str]:
        """Everyone the message goes to: the envelope, Bcc included."""
        return [*self.to, *self.cc, *self.bcc]


@dataclass(frozen=True)
class Turn:
    """One entry of a review's thread: a revision, a chat line, a decision, a breaker's hold."""

    id: str
    review_id: str
    seq: int
    turn_type: str
    actor_kind: str
    actor_id: str
    body: str
    revision: int
    created_at: datetime
    action: str = ""
    changed: bool = False  # a decision's edit actually changed subject or body
    diff_json: dict[str, Any] | None = None
    diff_unified: str | None = None
    rule_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Edge:
    """One move of the transition table, taken: the review before and after it."""

    before: Review
    after: Review
    verb: Verb
    actor: Actor

    @property
    def reason(self) -> Reason | None:
        """The nudge this move emits, by the table; None when it emits none."""
        return NUDGES.get((self.verb, self.actor))
