"""Review lineages (spec 003 "Session and range"): which reviewer session reviews which range. COLD
is a fresh session over the full base..head; WARM continues the lineage's verified previous session
over lastReviewedHead..head, or is refused visibly, never downgraded to COLD. Pure."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.review_dispatch.selection import ReviewMode, ReviewSelection, RunnerSpec

from dispatch_budget.domain.budget import FULL_SHA

MAX_LINEAGE_ID = 80
DEFAULT_LEASE = timedelta(seconds=120)


@dataclass(frozen=True)
class ReviewSession:
    """One reviewer session of a lineage, and the range it was bound to review."""

    session_id: str
    repository: str
    pr_number: int
    review_id: str  # the lineage
    runner: str
    model: str
    effort: str
    mode: ReviewMode
    base_sha: str
    range_base: str
    range_head: str
    last_reviewed_head: str | None
    busy: bool
    created_at: datetime
    # A busy binding is a lease the reviewer renews; past its expiry the reviewer is presumed crashed.
    lease_id: str = ""
    lease_expires_at: datetime | None = None

    @property
    def selection(self) -> ReviewSelection:
        return ReviewSelection(self.runner, self.model, self.effort, self.mode)

    def held(self, now: datetime) -> bool:
        """Busy under a live lease. Every busy row has one: the migration after the lease migration gave
        those from before leases a default lease (their reviewer may still run, spec 003: wait)."""
        return self.busy and self.lease_expires_at is not None and now < self.lease_expires_at


@dataclass(frozen=True)
class BindRequest:
    """A BindReviewSession request: the PR and the range base..head to bind a reviewer session to,
    the lineage a WARM review continues (``review_id``) or a COLD one names (``new_review_id``)."""

    repository: str
    pr_number: int
    base_sha: str
    head_sha: str
    review_id: str = ""
    new_review_id: str = ""

    def check(self) -> None:
        if not self.repository or self.pr_number < 1:
            raise invalid("/repository", "a review session binds to a repository/PR")
        for pointer, sha in (("/base_sha", self.base_sha), ("/head_sha", self.head_sha)):
            if not FULL_SHA.match(sha):
                raise invalid(pointer, "must be a full commit SHA")


@dataclass(frozen=True)
class Binding:
    review_id: str
    session_id: str
    mode: ReviewMode
    range_base: str
    range_head: str
    fresh_session: bool
    selection: ReviewSelection
    busy: bool
    lease_id: str = ""
    lease_expires_at: datetime | None = None

    @classmethod
    def of(cls, session: ReviewSession, fresh: bool) -> Binding:
        return cls(
            session.review_id,
            session.session_id,
            session.mode,
            session.range_base,
            session.range_head,
            fresh,
            session.selection,
            session.busy,
            session.lease_id if session.busy else "",
            session.lease_expires_at if session.busy else None,
        )


def check_lineage_id(review_id: str) -> None:
    if len(review_id) > MAX_LINEAGE_ID:
        raise invalid("/new_review_id", "at most 80 characters")


def refuse_warm(why: str) -> DomainError:
    return DomainError(
        Code.WRONG_STATE,
        f"WARM review refused: {why}. A WARM review never silently falls back to COLD; request COLD "
        "explicitly for a fresh session over the full range.",
        state="warm_unavailable",
    )


def cold_session(
    session_id: str,
    review_id: str,
    chosen: ReviewSelection,
    request: BindRequest,
    *,
    created_at: datetime,
    lease_id: str = "",
    lease: timedelta = DEFAULT_LEASE,
) -> ReviewSession:
    """A fresh session over the full base..head, busy (leased) with its first review."""
    return ReviewSession(
        session_id=session_id,
        repository=request.repository,
        pr_number=request.pr_number,
        review_id=review_id,
        runner=chosen.runner,
        model=chosen.model,
        effort=chosen.effort,
        mode=chosen.mode,
        base_sha=request.base_sha,
        range_base=request.base_sha,
        range_head=request.head_sha,
        last_reviewed_head=None,
        busy=True,
        created_at=created_at,
        lease_id=lease_id,
        lease_expires_at=created_at + lease,
    )


def warm_continuation(
    previous: ReviewSession | None,
    chosen: ReviewSelection,
    runner: RunnerSpec,
    request: BindRequest,
    *,
    now: datetime,
    lease_id: str = "",
    lease: timedelta = DEFAULT_LEASE,
) -> ReviewSession:
    """The lineage's previous session, rebound to review lastReviewedHead..head with the chosen model
    and effort; refused when it is missing, foreign, busy under a live lease, unverified or
    incompatible. An expired lease (a crashed reviewer) makes the lineage available again."""
    review_id = request.review_id
    if previous is None:
        raise refuse_warm(f"lineage {review_id} has no previous review session")
    if (previous.repository, previous.pr_number) != (request.repository, request.pr_number):
        raise refuse_warm(f"lineage {review_id} belongs to another repository/PR")
    if previous.held(now):
        assert previous.lease_expires_at is not None
        raise refuse_warm(
            f"session {previous.session_id} is busy with another review; wait for it (its lease "
            f"expires at {previous.lease_expires_at.isoformat()} unless its reviewer renews it)"
        )
    if not previous.last_reviewed_head:
        raise refuse_warm(f"session {previous.session_id} has no verified reviewed head")
    if previous.runner != chosen.runner:
        raise refuse_warm(f"lineage {review_id} runs on {previous.runner}, not {chosen.runner}")
    if (previous.model, previous.effort) != (
        chosen.model,
        chosen.effort,
    ) and not runner.supports_model_change:
        raise refuse_warm(f"{chosen.runner}'s session adapter cannot change model or effort mid-session")
    # The continuation is a WARM review whatever mode opened the lineage: the binding answers the
    # mode it runs in (a COLD-opened session continued WARM used to answer "cold").
    return replace(
        previous,
        model=chosen.model,
        effort=chosen.effort,
        mode=ReviewMode.WARM,
        range_base=previous.last_reviewed_head,
        range_head=request.head_sha,
        busy=True,
        lease_id=lease_id,
        lease_expires_at=now + lease,
    )


def renewed(session: ReviewSession, lease_id: str, now: datetime, lease: timedelta) -> ReviewSession:
    """A heartbeat: the lease holder extends its lease. A lease another binding took over, or a
    session that is not busy, refuses."""
    check_lease(session, lease_id)
    return replace(session, lease_expires_at=now + lease)


def check_lease(session: ReviewSession, lease_id: str) -> None:
    if not session.busy:
        raise DomainError(
            Code.WRONG_STATE,
            f"Session {session.session_id} is not busy; there is no lease to renew.",
            state="idle",
        )
    if lease_id != session.lease_id:
        raise DomainError(
            Code.WRONG_STATE,
            f"Session {session.session_id}'s lease was taken over by another review; stop this reviewer.",
            state="lease_taken_over",
        )


def check_reviewed_head(reviewed_head: str) -> None:
    if not FULL_SHA.match(reviewed_head):
        raise invalid("/reviewed_head", "must be a full commit SHA")


def completed(session: ReviewSession, reviewed_head: str) -> ReviewSession:
    """The session reviewed its range: ``reviewed_head`` is where a later WARM review continues."""
    if reviewed_head != session.range_head:
        raise invalid("/reviewed_head", f"the session was bound to review up to {session.range_head}")
    return replace(session, busy=False, last_reviewed_head=reviewed_head, lease_id="", lease_expires_at=None)
