"""A composer's redraft (``submit_revision``): what it replaces, and how a retry recognises it; and the
moves of the composer's two verbs that keep a draft under review, a redraft and a restamp."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from review_state.domain.decision import FORCED_PAST_DEADLINE, review_deadline
from review_state.domain.machine import Verb
from review_state.domain.review import Move, Review, Turn
from review_state.domain.submission import Attachment, Draft, Intent

T = TypeVar("T")


def _pick(new: T | None, old: T) -> T:
    return old if new is None else new


@dataclass(frozen=True)
class Revision:
    """A redraft: every field None keeps the draft's value; ``attachments=()`` clears them."""

    subject: str | None = None
    body_text: str | None = None
    body_html: str | None = None
    to: list[str] | None = None
    cc: list[str] | None = None
    bcc: list[str] | None = None
    reply_to: str | None = None
    headers: dict[str, str] | None = None
    attachments: tuple[Attachment, ...] | None = None
    intent: Intent | None = None
    confidence: float | None = None

    def apply(self, review: Review) -> Draft:
        """The draft this revision makes of ``review``."""
        return Draft(
            to=_pick(self.to, review.to),
            cc=_pick(self.cc, review.cc),
            bcc=_pick(self.bcc, review.bcc),
            subject=_pick(self.subject, review.subject),
            body_text=_pick(self.body_text, review.body_text),
            intent=_pick(self.intent, review.intent),
            body_html=_pick(self.body_html, review.body_html),
            reply_to=_pick(self.reply_to, review.reply_to),
            headers=_pick(self.headers, review.headers),
            attachments=_pick(self.attachments, review.attachments),
        )

    def fingerprint(self) -> dict[str, Any]:
        """The revision as plain JSON-able data, for idempotency hashes (attachments by digest)."""
        body = {k: v for k, v in self.__dict__.items() if k not in ("attachments", "intent")}
        if self.intent is not None:
            body["intent"] = self.intent.as_json()
        if self.attachments is not None:
            body["attachments"] = [
                [a.filename, a.content_type, hashlib.sha256(a.content).hexdigest()] for a in self.attachments
            ]
        return body


@dataclass(frozen=True)
class SubmitRevisionRequest:
    """A redraft as its agent sent it (``submit_revision``): the review and the (revision, version) it
    read, the new content, the rule snapshot it was composed under (a composition token or
    ``rules_version_seen``), the nudges it re-checked through, and its Idempotency-Key."""

    review_id: str
    parent_revision: int
    revision: Revision
    composition_token: str = ""
    expected_version: int | None = None
    rules_version_seen: int | None = None
    recheck_through_seq: int | None = None
    idempotency_key: str = ""


@dataclass(frozen=True)
class Redraft:
    """What a redraft's checks found: the (revision, version) its composer read, the new draft, and the
    rule high-water it was composed under (``snapshot_named``: it named a token or ``rules_version_seen``)."""

    parent_revision: int
    expected_version: int | None
    draft: Draft
    confidence: float | None
    rule_high_water: int
    snapshot_named: bool
    recheck_through_seq: int | None
    deadline_minutes: int  # a review agent's time to decide the new revision (0: no deadline)


def redraft_move(before: Review, redraft: Redraft, now: datetime, turn: Turn) -> Move:
    """A redraft: the next revision with the new draft, back to needs_review."""
    draft = redraft.draft
    # The new revision gets a review agent's full window from now (a deadline that forced the old
    # revision to a human is spent with it).
    forced = before.gate_outcome == FORCED_PAST_DEADLINE
    return Move(
        Verb.SUBMIT_REVISION,
        parent_revision=redraft.parent_revision,
        expected_version=redraft.expected_version,
        changed=replace(
            before,
            revision=before.revision + 1,
            to=list(draft.to),
            cc=list(draft.cc),
            bcc=list(draft.bcc),
            subject=draft.subject,
            body_text=draft.body_text,
            body_html=draft.body_html,
            reply_to=draft.reply_to,
            headers=dict(draft.headers),
            attachments=tuple(draft.attachments),
            intent=draft.intent,
            confidence=_pick(redraft.confidence, before.confidence),
            rule_high_water=redraft.rule_high_water,
            # A redraft naming neither a token nor rules_version_seen names no rule snapshot.
            rule_snapshot_unnamed=not redraft.snapshot_named,
            recheck_completed_through_seq=before.rechecked_through(redraft.recheck_through_seq),
            review_deadline=review_deadline(now, redraft.deadline_minutes),
            gate_outcome=None if forced else before.gate_outcome,
        ),
        turn=turn,
    )


@dataclass(frozen=True)
class RestampRequest:
    """A restamp as its agent sent it (``restamp_review``): the review and the (revision, version) it
    read, the rule snapshot it re-read (a composition token, or ``against_version`` and
    ``house_style_version``), the nudges it re-checked through, and its Idempotency-Key."""

    review_id: str
    parent_revision: int
    composition_token: str = ""
    expected_version: int | None = None
    against_version: int | None = None
    house_style_version: int | None = None
    recheck_through_seq: int | None = None
    idempotency_key: str = ""


@dataclass(frozen=True)
class Restamp:
    """What a restamp's checks found: the (revision, version) its composer read, and the rule
    high-water of the rules it re-read."""

    parent_revision: int
    expected_version: int | None
    rule_high_water: int
    recheck_through_seq: int | None


def restamp_move(before: Review, restamp: Restamp, turn: Turn) -> Move:
    """A restamp: no new revision, the rule high-water its composer re-read, and the recheck watermark."""
    return Move(
        Verb.RESTAMP,
        parent_revision=restamp.parent_revision,
        expected_version=restamp.expected_version,
        changed=replace(
            before,
            rule_high_water=restamp.rule_high_water,
            rule_snapshot_unnamed=False,  # it named what it re-read
            recheck_completed_through_seq=before.rechecked_through(restamp.recheck_through_seq),
        ),
        turn=turn,
    )
