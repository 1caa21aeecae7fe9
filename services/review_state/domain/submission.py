"""Submit-time checks of spec 000: recipients, sizes, and the intent gate of the review policy."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reviewloop.errors import Code, DomainError, FieldViolation, invalid

INTENT_SUMMARY_MIN, INTENT_SUMMARY_MAX = 8, 200
MAX_RECIPIENTS = 100
MAX_SUBJECT = 998  # RFC 5322's line limit
MAX_BODY = 2 * 1024 * 1024

_ADDRESS = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+$")


@dataclass(frozen=True)
class Draft:
    to: Sequence[str]
    cc: Sequence[str]
    bcc: Sequence[str]
    subject: str
    body_text: str
    intent: dict[str, Any] | None


def validate_draft(draft: Draft) -> None:
    """Shape errors first (every bad field at once), so nothing is stored for a malformed draft."""
    problems: list[FieldViolation] = []
    if not draft.to:
        problems.append(FieldViolation("/to", "at least one recipient is required"))
    for name, addresses in (("to", draft.to), ("cc", draft.cc), ("bcc", draft.bcc)):
        if len(addresses) > MAX_RECIPIENTS:
            problems.append(FieldViolation(f"/{name}", f"at most {MAX_RECIPIENTS} addresses"))
        for i, address in enumerate(addresses):
            if not _ADDRESS.match(address):
                problems.append(FieldViolation(f"/{name}/{i}", f"{address!r} is not an email address"))
    if len(draft.subject) > MAX_SUBJECT:
        problems.append(FieldViolation("/subject", f"at most {MAX_SUBJECT} characters"))
    if len(draft.body_text.encode()) > MAX_BODY:
        problems.append(FieldViolation("/body_text", f"at most {MAX_BODY} bytes"))
    if problems:
        raise DomainError(
            Code.BAD_REQUEST,
            "; ".join(f"{p.field}: {p.description}" for p in problems),
            violations=tuple(problems),
        )


def require_intent(intent: dict[str, Any] | None) -> None:
    """Under ``require_review`` every message carries an intent whose summary is one real sentence."""
    if intent is None:
        raise DomainError(
            Code.INTENT_REQUIRED,
            'This project reviews every outbound message, so the request needs an "intent": '
            '{"summary": "<one sentence for the reviewer, 8-200 characters>", "meta": {...}}. '
            "Nothing was sent and nothing was queued; resubmit with an intent.",
            violations=(FieldViolation("/intent", "required under the require_review policy"),),
        )
    summary = str(intent.get("summary", "")).strip()
    if not INTENT_SUMMARY_MIN <= len(summary) <= INTENT_SUMMARY_MAX:
        raise invalid(
            "/intent/summary",
            f"must be one sentence of {INTENT_SUMMARY_MIN}-{INTENT_SUMMARY_MAX} characters "
            f"(got {len(summary)}); nothing was sent and nothing was queued",
            Code.INTENT_REQUIRED,
        )
