"""Escalation names where a draft goes: a person (a human or admin key of the project) or a role, with
an optional deadline; the target is told by mail (when it has an address) and by the webhook event."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from reviewloop.errors import invalid

from review_state.domain.review import Review

PERSON, ROLE = "person", "role"
# The roles of a project an escalation may name: the kinds of key that decide a draft.
ROLES = {"human": "reviewers", "admin": "admins"}
ROLE_PREFIX = "role:"


@dataclass(frozen=True)
class Escalation:
    """Who an escalation names and by when. ``kind`` "" names no one (back to any reviewer)."""

    kind: str = ""
    target_id: str = ""
    name: str = ""
    deadline: datetime | None = None
    notify: tuple[str, ...] = ()  # the target's addresses, as the caller read them from its keys
    review_url: str = ""  # the console's page of the draft, for the mail
    by_name: str = ""  # how people read whoever escalated (its key's name)

    def check(self, now: datetime) -> None:
        """``bad_request`` naming the field at fault."""
        if self.kind not in ("", PERSON, ROLE):
            raise invalid("/escalate_to/kind", "must be person or role")
        if self.kind == PERSON and not self.target_id.startswith("key_"):
            raise invalid("/escalate_to/id", "a person is named by the id of a key of the project")
        if self.kind == ROLE and self.target_id not in ROLES:
            raise invalid("/escalate_to/id", f"a role is one of {', '.join(ROLES)}")
        if not self.kind and (self.target_id or self.notify):
            raise invalid("/escalate_to/kind", "must be person or role")
        if self.deadline is not None and self.deadline <= now:
            raise invalid("/escalation_deadline", "must be in the future")

    @property
    def stored_target(self) -> str | None:
        """The target as the review row keeps it (and a listing filters on it): a key id or role:<role>."""
        if not self.kind:
            return None
        return self.target_id if self.kind == PERSON else ROLE_PREFIX + self.target_id

    def stands(self, review: Review, by: str, now: datetime) -> Review:
        """``review`` with this escalation standing: its target, by whom, since when, by when."""
        return replace(
            review,
            escalated_to=self.stored_target,
            escalated_to_name=self.name or (ROLES.get(self.target_id, "") if self.kind == ROLE else None),
            escalated_by=by,
            escalated_at=now,
            escalation_deadline=self.deadline,
        )


def cleared(review: Review) -> Review:
    """``review`` with no escalation: a decision that settles the draft ends it (approve, edit, reject);
    a redraft keeps it."""
    return replace(
        review,
        escalated_to=None,
        escalated_to_name=None,
        escalated_by=None,
        escalated_at=None,
        escalation_deadline=None,
    )


# The review's fields an escalation writes (``Escalation.stands``) and ``cleared`` empties.
FIELDS = ("escalated_to", "escalated_to_name", "escalated_by", "escalated_at", "escalation_deadline")


def target_of(stored: str | None) -> tuple[str, str]:
    """(kind, id) of a stored target: ("", "") for an escalation that names no one."""
    if not stored:
        return "", ""
    if stored.startswith(ROLE_PREFIX):
        return ROLE, stored.removeprefix(ROLE_PREFIX)
    return PERSON, stored


def mine(actor_id: str, role: str) -> tuple[str, ...]:
    """The stored targets that read "escalated to me" for a key (its actor id and kind): its own id and its
    role."""
    return (actor_id, ROLE_PREFIX + role) if role in ROLES else (actor_id,)


def overdue(review: Review, now: datetime) -> bool:
    return review.escalation_deadline is not None and now >= review.escalation_deadline


def mail(review: Review, escalation: Escalation, by: str, feedback: str) -> tuple[str, str]:
    """The notification mail's subject and text (``by``: who escalated, as people read it)."""
    summary = (review.intent.summary if review.intent else "") or review.subject or review.id
    lines = [
        f"A draft was escalated to {'you' if escalation.kind == PERSON else escalation.name or 'your role'}"
        f" by {by}.",
        "",
        f"Draft: {summary}",
        f"Subject: {review.subject}",
        f"To: {', '.join(review.to)}",
    ]
    if escalation.deadline is not None:
        lines.append(f"Decide by: {escalation.deadline.isoformat(timespec='minutes').replace('+00:00', 'Z')}")
    if feedback:
        lines += ["", f"Why: {feedback}"]
    if escalation.review_url:
        lines += ["", f"Open it: {escalation.review_url}"]
    return f"Escalated to you: {summary}"[:200], "\n".join(lines) + "\n"
