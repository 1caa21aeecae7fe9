"""A composer's redraft (``submit_revision``): what it replaces, and how a retry recognises it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, TypeVar

from review_state.domain.review import Review
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
