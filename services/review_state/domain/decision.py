"""A reviewer's decision (approve | edit | reject | escalate): its shape, its verb, what it writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from reviewloop.errors import invalid

from review_state.domain.escalation import Escalation, cleared
from review_state.domain.html_part import html_of_text, sanitize_html
from review_state.domain.machine import State, Verb
from review_state.domain.review import Facts, Move, Review, Turn
from review_state.domain.submission import CHAT_MAX, MAX_SUBJECT

VERBS = {"approve": Verb.APPROVE, "edit": Verb.EDIT, "reject": Verb.REJECT, "escalate": Verb.ESCALATE}


@dataclass(frozen=True)
class Decision:
    action: str
    revision: int
    version: int
    subject: str | None = None
    body: str | None = None
    feedback: str = ""
    new_rule: dict[str, str] | None = None
    # The reviewer's own HTML part for an edit (sanitized); None regenerates it from the new text.
    body_html: str | None = None
    # The approval digest of the message the decider saw ("" names none): checked for approve and edit.
    message_sha256: str = ""
    # A human approves a draft a rule holds (born_stale) as it stands; recorded on the decision turn.
    override_held: bool = False
    # An escalation's target and deadline (escalate only; None: it names no one).
    escalation: Escalation | None = None

    def verb(self) -> Verb:
        """The table's verb for this decision, or ``bad_request`` naming the field at fault."""
        verb = VERBS.get(self.action)
        if verb is None:
            raise invalid("/action", "must be approve, edit, reject or escalate")
        if verb is Verb.EDIT and self.subject is None and self.body is None and self.body_html is None:
            raise invalid("/body", "an edit carries the new subject and/or body")
        if verb is not Verb.EDIT and (
            self.subject is not None or self.body is not None or self.body_html is not None
        ):
            raise invalid("/action", "subject, body and body_html are only for an edit")
        if self.subject is not None and ("\n" in self.subject or len(self.subject) > MAX_SUBJECT):
            raise invalid("/subject", "must be one line of at most 998 characters")
        if len(self.feedback) > CHAT_MAX:
            raise invalid("/feedback", f"at most {CHAT_MAX} characters")
        if self.escalation is not None and verb is not Verb.ESCALATE:
            raise invalid("/escalate_to", "only an escalation names a target and a deadline")
        return verb

    def edited(self, current: Review) -> Review:
        """``current`` with an edit's subject and parts: the new ones where it names them, the current
        ones elsewhere. Every part that is delivered is covered: the reviewer's HTML (sanitized) where it
        names one, else, when the text changed, the HTML part regenerated from the new text."""
        body_text = current.body_text if self.body is None else self.body
        body_html = current.body_html
        if self.body_html is not None:
            body_html = sanitize_html(self.body_html) if self.body_html.strip() else None
        elif current.body_html and body_text != current.body_text:
            body_html = html_of_text(body_text)
        return replace(
            current,
            subject=current.subject if self.subject is None else self.subject,
            body_text=body_text,
            body_html=body_html,
        )


def diffable(review: Review) -> dict[str, Any]:
    """The fields of a draft the diff service compares."""
    return {
        "subject": review.subject,
        "body_text": review.body_text,
        "body_html": review.body_html,
        "to": review.to,
        "cc": review.cc,
        "bcc": review.bcc,
        "reply_to": review.reply_to,
        "headers": review.headers,
    }


def decided(
    verb: Verb,
    current: Review,
    edited: Review | None,
    now: datetime,
    escalation: Escalation | None = None,
    by: str = "",
) -> Review:
    """``current`` (or ``edited``, an edit's new content) with what a decision writes besides the state.
    An escalation stands (with its target, or none) until a decision that settles the draft clears it."""
    # A decision spends the review deadline: it hurries a review agent toward a first decision of the
    # current revision, and a redraft starts a new one.
    base = edited if verb is Verb.EDIT and edited is not None else current
    after = replace(base, decided_at=now, review_deadline=None)
    if verb in (Verb.EDIT, Verb.REJECT, Verb.ESCALATE):
        # A reviewer's move starts a new generation of the draft: a composer still naming the old
        # revision is stale, which is what lets exactly one of concurrent writers win.
        after = replace(after, revision=current.revision + 1)
    if verb is Verb.ESCALATE:
        return (escalation or Escalation()).stands(after, by, now)
    return cleared(after) if current.escalated_at is not None else after


@dataclass(frozen=True)
class Ballot:
    """How a decision counts where it is written: short of its category's quorum (counted, the draft
    stays where it is), a human's override of a rule hold, a review agent's round (a hop)."""

    short: bool = False
    override: bool = False
    hop: bool = False


OVERRIDE_NOTE = "Approved as it stands, overriding the rule hold (its agent had not re-applied the rules)."


def turn_body(decision: Decision, ballot: Ballot) -> str:
    """The decision turn's body: what the decider said, after the note of an override of a rule hold."""
    return f"{OVERRIDE_NOTE} {decision.feedback}".strip() if ballot.override else decision.feedback


def decision_move(
    decision: Decision,
    before: Review,
    edited: Review | None,
    turn: Turn,
    send: Mapping[str, str],
    now: datetime,
    by: str,
    ballot: Ballot,
) -> Move:
    """The move a decision asks for: its verb on the (revision, version) the decider read, what it
    writes (``decided``; with ``send``'s ids when it lands on approved, in the same compare-and-set),
    its turn, and what its nudge says."""
    verb = decision.verb()
    # Each review-agent round is a hop, counted here for the reader; dispatch_budget bounds them.
    to = replace(
        decided(verb, before, edited, now, decision.escalation, by),
        reviewer_hops=before.reviewer_hops + ballot.hop,
    )
    return Move(
        verb,
        parent_revision=decision.revision,
        expected_version=decision.version,
        changed=to,
        if_approved=replace(to, send_path=send["send_path"], rfc_message_id=send["rfc_message_id"]),
        turn=turn,
        facts=Facts(said=decision.feedback),
        short_of_quorum=ballot.short,
        override_held=ballot.override,
    )


# Issue 19's breakers of the review-agent plane (``forced_by_breaker``).
REVIEW_DEADLINE_PASSED = "review_deadline_passed"  # spec 000's second breaker (NOTES.md); no round spent
POOL_BUDGET = "pool_budget"  # the From domain's shared pool spent its deployment-wide daily budget
QUORUM_REQUIRED = "quorum_required"  # a quorum the review agent's approval does not count toward


def review_deadline(submitted_at: datetime, minutes: int) -> datetime | None:
    """When a review agent's time to decide a draft submitted at ``submitted_at`` runs out."""
    return submitted_at + timedelta(minutes=minutes) if minutes > 0 else None


FORCED_PAST_DEADLINE = f"held:{REVIEW_DEADLINE_PASSED}"  # the gate_outcome of a draft it forced


def deadline_passed(review: Review, now: datetime) -> bool:
    """The draft's review deadline passed before a decision of its current revision (a decision or a
    breaker's hold clears it): it is the human's (a draft the sweep already forced stays the human's)."""
    return review.gate_outcome == FORCED_PAST_DEADLINE or (
        review.review_deadline is not None
        and review.state is State.NEEDS_REVIEW
        and now >= review.review_deadline
    )


def changed(edited: Review | None, before: Review) -> bool:
    """Whether an edit actually changed the draft (an edit that changed nothing reads as approved)."""
    return edited is not None and (
        edited.subject != before.subject
        or edited.body_text != before.body_text
        or edited.body_html != before.body_html
    )
