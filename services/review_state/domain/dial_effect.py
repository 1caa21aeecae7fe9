"""What a change of a category's risk dial would have done (issue 38): the last drafts of the category
replayed through the auto-send gates (``breaker``, then the daily cap) under the dial in force and under a
proposed one, and the category's graduation record (its clean-approval streak and edit rate).

The replay asks "had the category been graduated": it ignores the rung (graduating is a separate human
decision) and the canary's draw is the one the real gate makes (stable per review id)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

from review_state.domain.submission import Dial, breaker

DAILY_CAP = "daily_cap"  # the hold a spent daily auto-send cap gives (``_gates.spend_cap``)
# A human's decision of a past draft, as the graduation record counts it (``feedback.outcome_for_rules``).
APPROVED, EDITED, REJECTED = "approve", "edit", "reject"


@dataclass(frozen=True)
class PastDraft:
    """One past draft of the category, as the auto-send gates read it."""

    review_id: str
    confidence: float | None
    first_contact: bool  # a recipient had never had mail from the project when it was written
    day: date  # the UTC day it was written: the daily cap's window
    decision: str = ""  # its last human decision (approve, edit, reject), "" for none


@dataclass(frozen=True)
class Effect:
    """How many of ``considered`` drafts would have been auto-sent, and why the others would have been
    held (breaker name or ``daily_cap``: count)."""

    considered: int
    auto_sent: int
    held: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    """A category's graduation record over its last human decisions: how many clean approvals (approve
    without edit) in a row the newest decisions are, and the share of decisions that were edits."""

    decided: int
    clean_streak: int
    edit_rate: float


def effect(drafts: Sequence[PastDraft], dial: Dial) -> Effect:
    """Replay ``drafts`` (oldest first) through the gates of ``dial``: the first breaker that trips holds
    a draft; one that passes spends a unit of its day's cap, or is held ``daily_cap`` once it is spent."""
    spent: Counter[date] = Counter()
    held: Counter[str] = Counter()
    for draft in drafts:
        hold = breaker(
            dial=dial,
            confidence=draft.confidence,
            first_contact=draft.first_contact,
            review_id=draft.review_id,
        )
        if hold is None and spent[draft.day] >= dial.auto_send_cap_per_day:
            hold = DAILY_CAP
        if hold is None:
            spent[draft.day] += 1
        else:
            held[hold] += 1
    return Effect(considered=len(drafts), auto_sent=sum(spent.values()), held=dict(sorted(held.items())))


def record(decisions: Sequence[str]) -> Record:
    """The graduation record of ``decisions`` (newest first; "" for a draft no human decided, which
    neither breaks nor extends the streak)."""
    decided = [d for d in decisions if d in (APPROVED, EDITED, REJECTED)]
    streak = 0
    for decision in decided:
        if decision != APPROVED:
            break
        streak += 1
    edits = sum(1 for d in decided if d == EDITED)
    return Record(
        decided=len(decided), clean_streak=streak, edit_rate=edits / len(decided) if decided else 0.0
    )
