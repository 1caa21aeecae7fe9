"""The review aggregate: one outbound message under review, and the turns of its thread.

A ``Review`` is immutable: a transition is a compare-and-set that yields the next one (``version`` + 1),
and an ``Edge`` records which move of the transition table produced it, which is what decides the
nudge the move emits (``machine.NUDGES``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from review_state.domain.machine import NUDGES, Actor, Reason, State, Verb
from review_state.domain.pacing import StaleDraft
from review_state.domain.submission import Attachment, Intent


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
    intent: Intent | None
    created_at: datetime
    updated_at: datetime
    body_html: str | None = None
    reply_to: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()
    from_address: str = ""
    confidence: float | None = None
    rule_high_water: int = 0
    # It named no rule snapshot (no composition_token, no rules_version_seen): ``rule_high_water`` is the
    # stack's when it was written, which a rule saved later still leaves stale, not rules its agent read.
    rule_snapshot_unnamed: bool = False
    recheck_completed_through_seq: int = 0  # the agent's recheck watermark over its nudge seqs
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
    review_deadline: datetime | None = None  # a review agent decides before it, or a human does
    mode: str | None = None  # the mode the agent asked for (review | direct); None: it asked for none
    # Whom a reviewer escalated the draft to (a key id, or role:<role>; None: no one), by whom, when, and
    # by when it is to be decided; ``escalated_at`` None: not escalated (``domain.escalation``).
    escalated_to: str | None = None
    escalated_to_name: str | None = None
    escalated_by: str | None = None
    escalated_at: datetime | None = None
    escalation_deadline: datetime | None = None

    @property
    def recipients(self) -> list[str]:
        """Everyone the message goes to: the envelope, Bcc included."""
        return [*self.to, *self.cc, *self.bcc]

    def rechecked_through(self, seq: int | None) -> int:
        """The recheck watermark after its agent rechecked the draft through nudge ``seq`` (None: it
        named none): it never moves backwards."""
        return max(self.recheck_completed_through_seq, seq or 0)


@dataclass(frozen=True)
class AttachmentFacts:
    """What a revision's history shows of an attachment: never its bytes."""

    filename: str
    size: int
    sha256: str


@dataclass(frozen=True)
class RevisionContent:
    """The content of one revision of a review, kept so any two revisions can be compared."""

    review_id: str
    revision: int
    subject: str
    to: list[str]
    cc: list[str]
    bcc: list[str]
    body_text: str
    body_html: str | None
    attachments: tuple[AttachmentFacts, ...]
    created_at: datetime

    @classmethod
    def of(cls, review: Review) -> RevisionContent:
        return cls(
            review_id=review.id,
            revision=review.revision,
            subject=review.subject,
            to=list(review.to),
            cc=list(review.cc),
            bcc=list(review.bcc),
            body_text=review.body_text,
            body_html=review.body_html,
            attachments=tuple(
                AttachmentFacts(a.filename, len(a.content), hashlib.sha256(a.content).hexdigest())
                for a in review.attachments
            ),
            created_at=review.updated_at,
        )


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
class Facts:
    """What an edge's nudge says beyond the review before and after the edge."""

    said: str = ""  # the turn's text: a human's comment, a decision's feedback
    turn_id: str = ""
    cancelled_by: str = ""  # the caller's actor kind
    decision: str = ""  # how the reviewers' decisions read (``feedback.decision_of``), on `sent`
    breaker: str = ""  # the circuit breaker that held a review agent's release
    approvers: tuple[str, ...] = ()  # whose approval released the final revision, on `sent`


NO_FACTS = Facts()


@dataclass(frozen=True)
class Move:
    """A move of the transition table as a use case asks for it; the kernel checks it against the table
    and writes it (``_kernel.move``)."""

    verb: Verb
    parent_revision: int | None = None  # None names no revision (chat, the platform's edges)
    expected_version: int | None = None  # None: the revision guards alone
    # The review with what the move writes besides its state (``dataclasses.replace`` of it, so a
    # misspelt field is a type error); None writes nothing else. Its ``updated_at`` stands where it
    # moved it, else it is the move's time.
    changed: Review | None = None
    if_approved: Review | None = None  # written instead of ``changed`` when the move lands on approved
    turn: Turn | None = None  # the thread's entry, written with the compare-and-set
    facts: Facts = NO_FACTS  # what its nudge says
    # An approval (or edit) short of its quorum is legal where the table allows it, and leaves the
    # draft where it is.
    short_of_quorum: bool = False
    # A human approves a draft a rule holds as it stands (the human wins): no born_stale refusal, its
    # stale row is released.
    override_held: bool = False


@dataclass(frozen=True)
class Edge:
    """One move of the transition table, taken: the review before and after it, and the turn it wrote."""

    before: Review
    after: Review
    verb: Verb
    actor: Actor
    turn: Turn | None = None
    released: StaleDraft | None = None  # the stale row the move took: a rule no longer holds the draft

    @property
    def reason(self) -> Reason | None:
        """The nudge this move emits, by the table; None when it emits none."""
        return NUDGES.get((self.verb, self.actor))
