"""Which reviews the publication gate counts (spec 003 "Session and range", Amendment 3; spec 002's
evidence marker). Pure.

The gate fails closed. A passing review qualifies only when every one of these holds:

- it is a counted settlement with a ``pass`` verdict decoded from its attempt journal's closing
  ``turn_completed`` with the evidence marker ``accepted`` (spec 002), a record naming the reviewer
  session the receipt was admitted for (a line of another session is ``foreign_session``, never proof). An ``unknown`` marker (legacy
  with neither key, an unrecognized or forged value) is never proof; a verdict a runner merely
  reported, or one settled before evidence was kept, is historical provenance, not a passing review;
- the verdict is for the gate's current head (the admitted head and the journal's ``reviewed_head``);
- it ran in a reviewer session this service bound (``BindReviewSession``) for the run's
  repository/PR: a session id the service never issued proves nothing;
- its session has not already been counted: a retry or recheck in the same session updates that
  review, it never adds one; and one journal settles at most one review;
- it fills a row of the sequence: row 1 also selects the pipeline review (Amendment 3), so a pipeline
  attempt fills row 1 only, when its session ran row 1's selection; any other attempt fills a row
  whose runner, model, effort and mode its session ran. Each row is filled at most once.

So the count can never exceed the number of distinct bound sessions with accepted evidence for the
head, whatever attempts, retries, rechecks or forged lines were settled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dispatch_budget.domain.budget import AttemptKind
from dispatch_budget.domain.diffscope import scope_refusal

EVIDENCE_ACCEPTED = "accepted"  # settled from a journal whose closing record stamped accepted
EVIDENCE_REPORTED = "reported"  # a runner reported the verdict; no journal evidence
# The journal's closing record names a session other than the one the receipt was admitted for.
EVIDENCE_FOREIGN_SESSION = "foreign_session"


@dataclass(frozen=True)
class SessionFacts:
    """A reviewer session as the service bound it: the lineage provenance the gate verifies."""

    session_id: str
    repository: str
    pr_number: int
    runner: str
    model: str
    effort: str
    mode: str
    base_sha: str = ""  # the publication base its lineage reviews against


@dataclass(frozen=True)
class Attempt:
    """What the gate reads of one admission receipt and its settlement."""

    receipt_id: str
    kind: AttemptKind
    head_sha: str
    outcome: str | None  # counted | no_verdict | None (unsettled)
    verdict: str | None
    reason: str | None = None  # the no-verdict reason
    evidence: str | None = None  # accepted | rejected | absent | unknown | reported | None (legacy)
    reviewed_head: str | None = None
    review_session_id: str = ""
    journal_run_id: str = ""
    diff_scope: Mapping[str, Any] | None = None  # the verdict's Diff scope table


@dataclass(frozen=True)
class Row:
    """A row of the run's sequence (or of the project configuration's), or a free slot (no selection)
    when neither names rows."""

    index: int  # 1-based
    runner: str = ""
    model: str = ""
    effort: str = ""
    mode: str = ""

    @property
    def free(self) -> bool:
        return not self.runner


@dataclass(frozen=True)
class Refused:
    receipt_id: str
    reason: str


@dataclass(frozen=True)
class Filled:
    row: int
    receipt_id: str
    review_session_id: str


@dataclass(frozen=True)
class Tally:
    qualifying: int
    required: int
    rows: tuple[Row, ...]
    filled: tuple[Filled, ...]
    remaining: tuple[Row, ...]  # the rows still to request
    refused: tuple[Refused, ...]


def rows_of(sequence: Sequence[Mapping[str, str]], required: int) -> list[Row]:
    """The rows the gate fills: the sequence's, or ``required`` free slots when it names none."""
    if sequence:
        return [
            Row(i, r.get("runner", ""), r.get("model", ""), r.get("effort", ""), r.get("mode", ""))
            for i, r in enumerate(sequence, 1)
        ]
    return [Row(i) for i in range(1, max(1, required) + 1)]


def _same(row_value: str, session_value: str) -> bool:
    # A row's "default" (or empty) model/effort was resolved against the catalog when the row was
    # validated; an unresolved one (a configuration row) accepts what the session ran.
    return row_value in ("", "default") or row_value == session_value


def fits(row: Row, attempt: Attempt, session: SessionFacts) -> bool:
    """Whether the attempt, run in ``session``, is this row's review."""
    if attempt.kind is AttemptKind.PIPELINE and row.index != 1:
        return False  # Amendment 3: row 1 selects the pipeline review
    if row.free:
        return True
    return (
        row.runner == session.runner
        and _same(row.model, session.model)
        and _same(row.effort, session.effort)
        and _same(row.mode, session.mode)
    )


def _why_not(
    attempt: Attempt,
    head: str,
    sessions: Mapping[str, SessionFacts],
    repository: str,
    pr_number: int,
) -> str | None:
    """Why this attempt can never qualify for ``head``; None when it is a candidate."""
    if attempt.outcome is None:
        return "unsettled: it counts against the round budget but proves nothing yet"
    if attempt.outcome != "counted":
        return f"no verdict ({attempt.reason or 'no reason recorded'})" + (
            f"; its journal named head {attempt.reviewed_head}"
            if attempt.reviewed_head and attempt.reviewed_head != head
            else ""
        )
    if attempt.evidence == "unknown":
        return "evidence unknown (the marker is missing, unrecognized or forged): never proof of a verdict"
    if attempt.evidence == EVIDENCE_FOREIGN_SESSION:
        return (
            f"its journal's closing record names another session than {attempt.review_session_id or 'its own'}, "
            "the one its receipt was admitted for: another session's line is never this review's evidence"
        )
    if attempt.evidence == EVIDENCE_REPORTED:
        return "verdict reported by the runner without journal evidence; settle it from its attempt journal"
    if attempt.evidence != EVIDENCE_ACCEPTED:
        return "settled before verdict evidence was kept: historical provenance, not a passing review"
    if attempt.verdict != "pass":
        return f"verdict {attempt.verdict or 'missing'}, not pass"
    if attempt.head_sha != head or (attempt.reviewed_head or "") != head:
        return f"verdict for head {attempt.reviewed_head or attempt.head_sha}, not the gate's head {head}"
    if not attempt.review_session_id:
        return "names no reviewer session; a passing review needs its own bound session"
    session = sessions.get(attempt.review_session_id)
    if session is None:
        return f"session {attempt.review_session_id} was never bound by this service"
    if pr_number and (session.repository, session.pr_number) != (repository, pr_number):
        return f"session {attempt.review_session_id} belongs to another repository/PR"
    return scope_refusal(attempt.diff_scope, session.base_sha)


def tally(
    head: str,
    rows: Sequence[Row],
    attempts: Sequence[Attempt],
    sessions: Mapping[str, SessionFacts],
    *,
    repository: str = "",
    pr_number: int = 0,
) -> Tally:
    """The rows filled by qualifying reviews of ``head`` (a maximum matching of rows to distinct
    sessions), the rows that remain, and every attempt of ``head`` the gate refused and why."""
    refused: list[Refused] = []
    candidates = _candidates(head, attempts, sessions, repository, pr_number, refused)

    def options(session_id: str) -> list[tuple[Row, Attempt]]:
        session = sessions[session_id]
        return [(row, a) for row in rows for a in candidates[session_id] if fits(row, a, session)]

    # Maximum bipartite matching of rows to sessions (augmenting paths; at most ten rows).
    row_owner: dict[int, str] = {}
    chosen: dict[str, tuple[Row, Attempt]] = {}

    def assign(session_id: str, seen: set[int]) -> bool:
        for row, attempt in options(session_id):
            if row.index in seen:
                continue
            seen.add(row.index)
            owner = row_owner.get(row.index)
            if owner is None or assign(owner, seen):
                row_owner[row.index] = session_id
                chosen[session_id] = (row, attempt)
                return True
        return False

    for session_id in candidates:
        assign(session_id, set())
    counted = {attempt.receipt_id for _, attempt in chosen.values()}
    for session_id, attempts_in in candidates.items():
        for attempt in attempts_in:
            if attempt.receipt_id in counted:
                continue
            if session_id in chosen:
                why = (
                    f"session {session_id} is already counted for row {chosen[session_id][0].index}: "
                    "a retry or recheck in one session is one review"
                )
            elif not options(session_id):
                why = _no_row(attempt, sessions[session_id], rows)
            else:
                why = "every row it fits is already filled by another session's review"
            refused.append(Refused(attempt.receipt_id, why))
    filled = tuple(
        sorted(
            (Filled(row.index, attempt.receipt_id, sid) for sid, (row, attempt) in chosen.items()),
            key=lambda f: f.row,
        )
    )
    remaining = tuple(row for row in rows if row.index not in row_owner)
    return Tally(len(filled), len(rows), tuple(rows), filled, remaining, tuple(refused))


def _candidates(
    head: str,
    attempts: Sequence[Attempt],
    sessions: Mapping[str, SessionFacts],
    repository: str,
    pr_number: int,
    refused: list[Refused],
) -> dict[str, list[Attempt]]:
    """Each session's attempts of ``head`` that may count, first admitted first; the others go to
    ``refused`` with why."""
    candidates: dict[str, list[Attempt]] = {}
    journals: set[str] = set()
    for attempt in attempts:
        if attempt.head_sha != head and (attempt.reviewed_head or attempt.head_sha) != head:
            continue  # an older head's review: not this gate's business
        why = _why_not(attempt, head, sessions, repository, pr_number)
        if why is None and attempt.journal_run_id:
            if attempt.journal_run_id in journals:
                why = f"journal {attempt.journal_run_id} already settled another review"
            journals.add(attempt.journal_run_id)
        if why is not None:
            refused.append(Refused(attempt.receipt_id, why))
            continue
        candidates.setdefault(attempt.review_session_id, []).append(attempt)
    return candidates


def _no_row(attempt: Attempt, session: SessionFacts, rows: Sequence[Row]) -> str:
    ran = f"{session.runner}/{session.model}/{session.effort}/{session.mode}"
    if attempt.kind is AttemptKind.PIPELINE:
        first = rows[0]
        return f"pipeline review ran {ran}; row 1 selects {first.runner}/{first.model}/{first.effort}/{first.mode}"
    return f"its session ran {ran}, which matches no row of the sequence"
