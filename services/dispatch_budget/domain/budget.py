"""Reviewer round budget arithmetic (spec 003 "Round budget", "No-verdict attempts", "Scoped
extension"). Pure: plain data in, a decision or a DomainError out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from reviewloop.errors import Code, DomainError, invalid

MAX_REVIEW_ROUNDS = 5
REVIEW_NO_VERDICT_LIMIT = 3
MAX_EXTENSION_STEP = 5  # a grant raises the limit by one to five rounds
MAX_SCOPE_BRIEF = 4000
FULL_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


class AttemptKind(StrEnum):
    """Every kind spends the same budget; a worker fix is not a reviewer round and has no kind."""

    INITIAL = "initial"
    RETRY = "retry"
    PIPELINE = "pipeline"
    STANDALONE = "standalone"
    PUBLISH_GATE = "publish_gate"
    RECHECK = "recheck"


class Trigger(StrEnum):
    OPERATOR_REQUEST = "operator_request"
    CONTINUE_FIXING = "continue_fixing"
    SEND_BACK = "send_back"
    FIX_REREVIEW = "fix_rereview"
    RECOVERED_FIX_REREVIEW = "recovered_fix_rereview"
    PUBLICATION_PLAN = "publication_plan"


# The automatic launches that stop at the no-verdict cap; an operator's launches still go.
AUTOMATIC = frozenset({Trigger.FIX_REREVIEW, Trigger.RECOVERED_FIX_REREVIEW, Trigger.PUBLICATION_PLAN})


class NoVerdictReason(StrEnum):
    """The ends that spend no round (spec 003 "No-verdict attempts")."""

    TIMED_OUT = "timed_out"
    EXITED = "exited"
    MISSING_RESULT = "missing_result"
    UNUSABLE_RESULT = "unusable_result"
    LAUNCH_FAILED = "launch_failed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    REATTACH_FAILED = "reattach_failed"
    RECOVERED_FAILURE = "recovered_failure"
    MONITOR_ENDED_WITHOUT_RESULT = "monitor_ended_without_result"


VERDICTS = frozenset({"pass", "issues"})


class RunStatus(StrEnum):
    ACTIVE = "active"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    PUBLISHED = "published"
    ARCHIVED = "archived"


def scope_key(run_id: str, repository: str, pr_number: int) -> str:
    """The admission scope: the repository/PR once it exists, else the canonical run."""
    if repository and pr_number > 0:
        return f"pr:{repository}#{pr_number}"
    return f"run:{run_id}"


@dataclass(frozen=True)
class ReviewRoundBudget:
    admissions: int
    no_verdict: int
    limit: int = MAX_REVIEW_ROUNDS
    no_verdict_limit: int = REVIEW_NO_VERDICT_LIMIT

    @property
    def used(self) -> int:
        """Rounds used are admissions minus no-verdict settlements."""
        return self.admissions - self.no_verdict

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    @property
    def no_verdict_capped(self) -> bool:
        return self.no_verdict >= self.no_verdict_limit

    @property
    def label(self) -> str:
        return review_round_budget_label(self)


def review_round_budget_label(budget: ReviewRoundBudget) -> str:
    """``N/L``, plus the no-verdict count against its cap once there is one."""
    text = f"{budget.used}/{budget.limit}"
    if budget.no_verdict:
        text += f" (no-verdict {budget.no_verdict}/{budget.no_verdict_limit})"
    return text


def check_admission(budget: ReviewRoundBudget, trigger: Trigger, last_failures: list[str]) -> None:
    """Refuse before anything is consumed: a spent budget, or the no-verdict cap for automatic launches."""
    if budget.exhausted:
        raise DomainError(
            Code.QUOTA_EXCEEDED,
            f"Review round budget spent ({budget.label}): no further reviewer round is admitted. Stop and "
            "diagnose a design problem or scope creep, then narrow the scope or redesign; an admin may "
            "grant a scoped extension.",
            hints=(("review_round_budget", budget.label),),
        )
    if budget.no_verdict_capped and trigger in AUTOMATIC:
        failures = ", ".join(last_failures) or "none recorded"
        raise DomainError(
            Code.QUOTA_EXCEEDED,
            f"Automatic review launch stopped: {budget.no_verdict} of {budget.no_verdict_limit} reviewer "
            f"attempts ended without a verdict (last failures: {failures}). The findings are kept; an "
            "operator's Request Review, Continue Fixing or Send back still launches.",
            hints=(("review_round_budget", budget.label), ("no_verdict", str(budget.no_verdict))),
        )


@dataclass(frozen=True)
class ExtensionInput:
    head_sha: str
    new_limit: int
    expected_prior_limit: int
    scope_brief: str
    idempotency_key: str


def validate_extension_shape(request: ExtensionInput) -> None:
    """The input checks that need no state: full SHA, brief, key, an integer limit."""
    if not request.idempotency_key.strip():
        raise invalid("/idempotency_key", "an idempotency key (--request-id) is required")
    if not FULL_SHA.match(request.head_sha):
        raise invalid("/head_sha", "must be the full current head SHA (40 or 64 lowercase hex)")
    if not request.scope_brief.strip():
        raise invalid("/scope_brief", "a non-empty scope brief is required")
    if len(request.scope_brief) > MAX_SCOPE_BRIEF:
        raise invalid("/scope_brief", f"at most {MAX_SCOPE_BRIEF} characters")
    if request.expected_prior_limit < 1:
        raise invalid("/expected_limit", "the expected prior limit is required (compare-and-set)")


def check_extension_limits(request: ExtensionInput, effective_limit: int) -> None:
    """The compare-and-set on the prior limit, then the one-to-five-rounds-above rule."""
    if request.expected_prior_limit != effective_limit:
        raise DomainError(
            Code.CONFLICT,
            f"The effective limit is {effective_limit}, not the expected {request.expected_prior_limit}; "
            "re-read the budget and retry with the current limit.",
            hints=(("limit", str(effective_limit)),),
        )
    low, high = effective_limit + 1, effective_limit + MAX_EXTENSION_STEP
    if not low <= request.new_limit <= high:
        raise invalid(
            "/limit", f"must be an integer from {low} to {high} (one to five above {effective_limit})"
        )
