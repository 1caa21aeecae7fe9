"""The records of spec 003's round budget and the rules over them: a run's snapshot and its
review-mode rungs, an admission receipt and its settlement, a scoped extension receipt, a stopped
automatic launch. Pure: plain data in, plain data or a DomainError out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.review_dispatch.selection import ReviewMode, resolve_review_mode

from dispatch_budget.domain.budget import (
    FULL_SHA,
    VERDICTS,
    AttemptKind,
    ExtensionInput,
    NoVerdictReason,
    ReviewRoundBudget,
    RunStatus,
    Trigger,
    check_extension_limits,
    scope_key,
)
from dispatch_budget.domain.diffscope import ScopeTableRefused, check_scope_table
from dispatch_budget.domain.evidence import EvidenceStatus, evidence_status
from dispatch_budget.domain.journal import JournalRecord
from dispatch_budget.domain.qualifying import EVIDENCE_FOREIGN_SESSION, EVIDENCE_REPORTED, Refused, Row, Tally

MAX_RUN_ID = 80
MAX_ATTEMPT_KEY = 200


# --- runs ---


@dataclass(frozen=True)
class RunModes:
    """The run's stored rungs of resolveReviewMode: Run.reviewMode, Run.prWork.review.options.mode
    and the retained Run.repeatReviewContext.mode."""

    review: ReviewMode | None = None
    pr_work: ReviewMode | None = None
    repeat_context: ReviewMode | None = None

    def merged(self, update: RunModes) -> RunModes:
        """``update``'s set rungs over these."""
        return RunModes(
            update.review or self.review,
            update.pr_work or self.pr_work,
            update.repeat_context or self.repeat_context,
        )

    def resolve(
        self, explicit: ReviewMode | None, project_default: ReviewMode | None
    ) -> tuple[ReviewMode, str]:
        """resolveReviewMode with these rungs between the explicit mode and the project default."""
        return resolve_review_mode(explicit, self.review, self.pr_work, self.repeat_context, project_default)


@dataclass(frozen=True)
class Run:
    run_id: str
    repository: str
    pr_number: int
    head_sha: str
    status: RunStatus
    scope_key: str
    modes: RunModes = field(default_factory=RunModes)
    # The run's reviewSequence (validated rows); empty: the project review configuration decides.
    review_sequence: tuple[dict[str, str], ...] = ()
    # The principal that created the run (kind:id); "" for runs created before owners were kept.
    owner: str = ""

    @property
    def closed(self) -> bool:
        """A published or archived run admits no reviewer and takes no extension."""
        return self.status in (RunStatus.PUBLISHED, RunStatus.ARCHIVED)


def run_not_found(run_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No run {run_id} is visible to this key; record it first.")


@dataclass(frozen=True)
class RunSnapshot:
    """A RecordRun request: the run as its caller sees it now. What it leaves unset ("", 0, None, no
    rows) keeps what the run had."""

    run_id: str
    repository: str = ""
    pr_number: int = 0
    head_sha: str = ""
    status: RunStatus | None = None
    modes: RunModes | None = None
    # The reviewSequence rows: as given to the use case, validated rows once it checked them.
    review_sequence: tuple[Any, ...] = ()

    def check(self) -> None:
        if not self.run_id or len(self.run_id) > MAX_RUN_ID:
            raise invalid("/run_id", "a run id of 1 to 80 characters is required")
        if self.pr_number < 0:
            raise invalid("/pr_number", "must be a positive PR number, or 0 before a PR exists")
        if self.pr_number and not self.repository:
            raise invalid("/repository", "a PR identity needs its repository")
        if self.head_sha and not FULL_SHA.match(self.head_sha):
            raise invalid("/head_sha", "must be a full commit SHA (40 or 64 lowercase hex)")


def next_run(prior: Run | None, snapshot: RunSnapshot, owner: str = "") -> Run:
    """The run after a snapshot: what the snapshot leaves unset keeps what the run had. A verified
    repository/PR identity is never rebound, and a published or archived run never becomes active.
    ``owner`` (the caller) owns a new run; a stored run keeps its owner."""
    run_id, repository, pr_number = snapshot.run_id, snapshot.repository, snapshot.pr_number
    head_sha, status = snapshot.head_sha, snapshot.status
    stored = (prior.modes if prior is not None else RunModes()).merged(snapshot.modes or RunModes())
    if prior is not None:
        if prior.pr_number and pr_number and (prior.pr_number, prior.repository) != (pr_number, repository):
            raise DomainError(Code.CONFLICT, f"Run {run_id} is already bound to {prior.scope_key}.")
        repository = repository or prior.repository
        pr_number = pr_number or prior.pr_number
        head_sha = head_sha or prior.head_sha
        if status is None:
            status = prior.status
        elif prior.closed and status is RunStatus.ACTIVE:
            raise DomainError(Code.WRONG_STATE, f"Run {run_id} is {prior.status}; it cannot become active.")
    return Run(
        run_id,
        repository,
        pr_number,
        head_sha,
        status or RunStatus.ACTIVE,
        scope_key(run_id, repository, pr_number),
        stored,
        snapshot.review_sequence or (prior.review_sequence if prior is not None else ()),
        prior.owner if prior is not None else owner,
    )


# --- admissions and settlements ---


class Outcome(StrEnum):
    """A settled attempt: it counts (a verdict, or an end that fails closed), or it spends no round."""

    COUNTED = "counted"
    NO_VERDICT = "no_verdict"


@dataclass(frozen=True)
class Settlement:
    outcome: Outcome
    reason: str | None = None  # a NoVerdictReason for a no-verdict end
    verdict: str | None = None  # pass | issues
    # What the verdict rests on (domain.qualifying): the journal's decoded marker, or "reported".
    evidence: str | None = None
    reviewed_head: str | None = None  # the head the verdict (or the journal) names
    journal_run_id: str = ""  # the attempt journal it was settled from
    # The verdict's Diff scope table (domain.diffscope), or {"refused": why}; None when it had none.
    diff_scope: dict[str, Any] | None = None


@dataclass(frozen=True)
class Receipt:
    """An admission receipt: persisted before the runner starts; ``outcome`` is None while unsettled
    (which counts: fail closed)."""

    receipt_id: str
    run_id: str
    scope_key: str
    attempt_key: str
    kind: AttemptKind
    trigger: Trigger
    head_sha: str
    selection: dict[str, str]
    admitted_at: datetime
    round: int
    outcome: Outcome | None = None
    reason: str | None = None
    verdict: str | None = None
    settled_at: datetime | None = None
    admitted_by: str = ""  # the admission owner (kind:id); "" for receipts admitted before it was kept
    review_session_id: str = ""  # the reviewer session it ran in, when the runner named it
    evidence: str | None = None  # see Settlement; None for settlements from before it was kept
    reviewed_head: str | None = None
    journal_run_id: str = ""
    diff_scope: dict[str, Any] | None = None


@dataclass(frozen=True)
class AdmissionRequest:
    """An AdmitReviewRound request: the attempt to admit on a run, or the receipt it reattaches to."""

    run_id: str
    attempt_key: str
    kind: AttemptKind
    trigger: Trigger
    head_sha: str
    selection: dict[str, str]
    receipt_id: str = ""
    # The spec 001 agent session whose review in flight the attempt is (its timeout settles it).
    session_id: str = ""
    # The reviewer session the attempt runs in.
    review_session_id: str = ""

    def check(self) -> None:
        if not self.receipt_id and not self.attempt_key:
            raise invalid("/attempt_key", "name the attempt (run, engine generation, sequence row)")
        if len(self.attempt_key) > MAX_ATTEMPT_KEY:
            raise invalid("/attempt_key", "at most 200 characters")
        if self.head_sha and not FULL_SHA.match(self.head_sha):
            raise invalid("/head_sha", "must be the full reviewed head SHA")


def reported_settlement(
    head: str, verdict: str, reviewed_head: str, reason: str, diff_scope: Any = None
) -> Settlement:
    """A settlement the runner reports: a verdict for the admitted head counts (the round is spent),
    but it is ``reported``, not evidence, so the publication gate never counts it as a passing
    review (domain.qualifying); otherwise one of the spec's no-verdict ends."""
    if verdict:
        if verdict not in VERDICTS:
            raise invalid("/verdict", "must be pass or issues")
        if reviewed_head != head:
            raise invalid("/reviewed_head", f"the verdict must be for the admitted head {head}")
        table = None
        if diff_scope is not None:
            try:
                table = check_scope_table(diff_scope, reviewed_head)
            except ScopeTableRefused as exc:
                raise invalid("/diff_scope", str(exc)) from None
        return Settlement(Outcome.COUNTED, None, verdict, EVIDENCE_REPORTED, reviewed_head, "", table)
    try:
        return Settlement(Outcome.NO_VERDICT, NoVerdictReason(reason).value)
    except ValueError:
        raise invalid(
            "/no_verdict_reason",
            f"give a verdict, or one of {', '.join(r.value for r in NoVerdictReason)}",
        ) from None


def journal_settlement(
    final: JournalRecord | None, head: str, journal_run_id: str = "", session: str = ""
) -> Settlement:
    """The settlement the attempt journal's closing turn_completed implies. Accepted evidence with a
    verdict for the admitted head counts with that verdict. Unknown evidence (legacy with neither key,
    an unrecognized or forged marker) fails closed: the round is spent, but no verdict is recorded,
    since an unknown marker must never be guessed (spec 002). So does a closing record naming a session
    other than ``session``, the reviewer session the receipt was admitted for: another session's line
    is not this attempt's evidence, whatever it says (a copied journal launders nothing). Rejected,
    absent, a verdict for another head or no usable verdict are no-verdict ends."""
    if final is None:
        return Settlement(
            Outcome.NO_VERDICT, NoVerdictReason.MISSING_RESULT.value, None, None, None, journal_run_id
        )
    payload = final.payload
    status = evidence_status(payload)
    verdict = payload.get("verdict")
    verdict = verdict if isinstance(verdict, str) and verdict in VERDICTS else ""
    named = payload.get("reviewed_head")
    reviewed = named if isinstance(named, str) and len(named) <= 64 else None
    facts: dict[str, Any] = {
        "evidence": status.value,
        "reviewed_head": reviewed,
        "journal_run_id": journal_run_id,
        "diff_scope": _journal_scope(payload, reviewed),
    }
    if session and final.session_id != session:
        return Settlement(Outcome.COUNTED, None, None, **{**facts, "evidence": EVIDENCE_FOREIGN_SESSION})
    if status is EvidenceStatus.UNKNOWN:
        return Settlement(Outcome.COUNTED, None, None, **facts)
    if status is EvidenceStatus.ACCEPTED and verdict and reviewed == head:
        return Settlement(Outcome.COUNTED, None, verdict, **facts)
    if status is EvidenceStatus.ABSENT:
        return Settlement(Outcome.NO_VERDICT, NoVerdictReason.MISSING_RESULT.value, None, **facts)
    return Settlement(Outcome.NO_VERDICT, NoVerdictReason.UNUSABLE_RESULT.value, None, **facts)


def _journal_scope(payload: Mapping[str, Any], reviewed_head: str | None) -> dict[str, Any] | None:
    """The closing record's ``diff_scope``: the table, None when it carried none, or why it was refused
    (the settlement stands; the gate refuses the verdict, spec 003)."""
    if "diff_scope" not in payload:
        return None
    try:
        return check_scope_table(payload["diff_scope"], reviewed_head or "")
    except ScopeTableRefused as exc:
        return {"refused": str(exc)}


def settlement_to_write(
    receipt_id: str, current: Outcome | None, new: Settlement, current_evidence: str | None = None
) -> Settlement | None:
    """An attempt settles once; a verdict arriving after a no-verdict settlement clears it and the
    attempt counts, and journal evidence arriving for a verdict that was only reported replaces it.
    None: a retried settlement, where the first one stands (an ``unknown`` marker stays unknown)."""
    if current is None or (current is Outcome.NO_VERDICT and new.outcome is Outcome.COUNTED):
        return new
    if current is new.outcome:
        upgrade = (
            current is Outcome.COUNTED
            and new.evidence == EvidenceStatus.ACCEPTED.value
            and current_evidence in (None, EVIDENCE_REPORTED)
        )
        return new if upgrade else None
    raise DomainError(
        Code.CONFLICT,
        f"Receipt {receipt_id} already settled as {current}; an attempt settles once.",
        state=current.value,
    )


@dataclass(frozen=True)
class LaunchRefusal:
    """An automatic launch the no-verdict cap stopped, as the gate recorded it (spec 003)."""

    run_id: str
    attempt_key: str
    trigger: Trigger
    no_verdict: int
    reason: str
    refused_at: datetime


# --- scoped extensions ---


@dataclass(frozen=True)
class Origin:
    """The authenticated request origin, set by the gateway from the key, never from the body."""

    actor_kind: str
    actor_id: str
    key_id: str = ""
    remote_addr: str = ""
    user_agent: str = ""


@dataclass(frozen=True)
class ExtensionReceipt:
    """run.extendReviewBudget's receipt: who granted how many rounds, for which head and scope."""

    receipt_id: str
    idempotency_key: str
    request_id: str
    run_id: str
    repository: str
    pr_number: int
    scope_key: str
    approved_head: str
    prior_limit: int
    new_limit: int
    scope_brief: str
    origin: Origin
    granted_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The receipt as it is stored and replayed."""
        return {
            "receipt_id": self.receipt_id,
            "idempotency_key": self.idempotency_key,
            "request_id": self.request_id,
            "run_id": self.run_id,
            "repository": self.repository,
            "pr_number": self.pr_number,
            "scope_key": self.scope_key,
            "approved_head": self.approved_head,
            "prior_limit": self.prior_limit,
            "new_limit": self.new_limit,
            "scope_brief": self.scope_brief,
            "origin": asdict(self.origin),
            "granted_at": self.granted_at.isoformat(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExtensionReceipt:
        origin = data["origin"]
        return cls(
            receipt_id=data["receipt_id"],
            idempotency_key=data["idempotency_key"],
            request_id=data.get("request_id", ""),
            run_id=data["run_id"],
            repository=data["repository"],
            pr_number=data["pr_number"],
            scope_key=data["scope_key"],
            approved_head=data["approved_head"],
            prior_limit=data["prior_limit"],
            new_limit=data["new_limit"],
            scope_brief=data["scope_brief"],
            origin=Origin(
                origin["actor_kind"],
                origin["actor_id"],
                origin.get("key_id", ""),
                origin.get("remote_addr", ""),
                origin.get("user_agent", ""),
            ),
            granted_at=datetime.fromisoformat(data["granted_at"]),
        )


def check_grant(run: Run, request: ExtensionInput, effective_limit: int) -> None:
    """Only an unpublished, unarchived run at the head the admin approved is extended, by a
    compare-and-set on its effective limit."""
    if run.closed:
        raise DomainError(
            Code.WRONG_STATE,
            f"Run {run.run_id} is {run.status}; only an unpublished, unarchived run is extended.",
        )
    if not run.head_sha:
        raise DomainError(Code.STALE, f"Run {run.run_id}'s live head is unknown; record its head first.")
    if run.head_sha != request.head_sha:
        raise DomainError(
            Code.STALE,
            f"head_sha {request.head_sha} is not run {run.run_id}'s current head; re-read the run and retry.",
            hints=(("head_sha", run.head_sha),),
        )
    check_extension_limits(request, effective_limit)


def grant_receipt(
    receipt_id: str,
    run: Run,
    request: ExtensionInput,
    prior_limit: int,
    origin: Origin,
    request_id: str,
    granted_at: datetime,
) -> ExtensionReceipt:
    return ExtensionReceipt(
        receipt_id=receipt_id,
        idempotency_key=request.idempotency_key,
        request_id=request_id,
        run_id=run.run_id,
        repository=run.repository,
        pr_number=run.pr_number,
        scope_key=run.scope_key,
        approved_head=run.head_sha,
        prior_limit=prior_limit,
        new_limit=request.new_limit,
        scope_brief=request.scope_brief.strip(),
        origin=origin,
        granted_at=granted_at,
    )


@dataclass(frozen=True)
class ReadyGate:
    """ReadyGatePayload's review side (spec 003): the round budget's display snapshot, the passing
    reviews of the current head that qualify (domain.qualifying: accepted journal evidence, the
    current head, a bound session counted once, attributed to a sequence row) against those
    required, the rows still to request, the reviews it refused and why, and whether the approval
    conditions this gate checks hold. A spent budget is never a blocker; an extension never makes a
    stale review count."""

    run: Run
    budget: Budget
    tally: Tally
    blockers: tuple[str, ...]

    @property
    def qualifying(self) -> int:
        return self.tally.qualifying

    @property
    def required(self) -> int:
        return self.tally.required

    @property
    def remaining(self) -> tuple[Row, ...]:
        return self.tally.remaining

    @property
    def refused(self) -> tuple[Refused, ...]:
        return self.tally.refused

    @property
    def publishable(self) -> bool:
        return not self.blockers


def ready_gate(run: Run, budget: Budget, tally: Tally) -> ReadyGate:
    blockers: list[str] = []
    if run.closed:
        blockers.append(f"run {run.run_id} is {run.status}")
    if not run.head_sha:
        blockers.append("the run's current head is unknown; record it first")
    elif tally.qualifying < tally.required:
        blockers.append(
            f"{tally.qualifying} of {tally.required} required passing reviews of head {run.head_sha} "
            "with accepted journal evidence in separate bound reviewer sessions; request rows "
            + ", ".join(str(row.index) for row in tally.remaining)
        )
    return ReadyGate(run, budget, tally, tuple(blockers))


@dataclass(frozen=True)
class Budget:
    """A scope's round budget as callers read it: the arithmetic, the latest grant, and the latest
    automatic launch the no-verdict cap stopped."""

    scope_key: str
    budget: ReviewRoundBudget
    extension: ExtensionReceipt | None = None
    last_launch_refusal: LaunchRefusal | None = None
