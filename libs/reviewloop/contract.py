"""The contract version and manifest (spec 000, "Version"): one value on every surface."""

from importlib.metadata import version as _dist_version
from typing import Final

from reviewloop.errors import REVIEW_PROBLEM_RETRY_LIMITS, REVIEW_PROBLEM_RETRYABLE

CONTRACT_VERSION: Final = "0.1.0-pre.6"

# Every shape by the SDK's type name (spec/SDK.md: the SDK is the reference where the spec is silent), then
# the ones this surface adds. Where the SDK names a generic (``Page<Review>``), the component is named
# ``ReviewList``; ``SubmitForReviewResult`` is one schema whose ``kind`` tells the SDK's
# ``QueuedForReviewResult`` from its ``SentResult``. The SDK's commerce plane and ``LearnedReviewRule``
# (``learn_review_rule`` answers a ``Rule``) are not served here, so not promised.
CONTRACT_MANIFEST: Final = {
    "name": "extrovert.review-loop",
    "version": CONTRACT_VERSION,
    "stability": "provisional",
    "kind": "sdk+skill-contract",
    "spec_ref": "spec 000 (0.1.0-pre.6)",
    "core_shapes": ["ReviewIntent", "ReviewFeedback", "DiffJson", "Rule", "ReviewEvent"],
    "shapes": [
        # core
        "ReviewIntent",
        "ReviewFeedback",
        "ReviewFeedbackComment",
        "DiffJson",
        "DiffHunk",
        "Rule",
        "ReviewEvent",
        # submit, states and reads
        "ReviewMode",
        "ReviewState",
        "Review",
        "ReviewTurn",
        "SubmitForReviewResult",
        # review events
        "ReviewEventsResult",
        "ReviewEventCursor",
        "LearnReviewRuleRequest",
        # chat, revision, restamp
        "PostReviewChatRequest",
        "SubmitRevisionRequest",
        "RestampReviewRequest",
        # categories
        "Category",
        "ProposeCategoryRequest",
        "UpdateCategoryRequest",
        # graduation and the risk dial
        "AccountRiskDial",
        "EffectiveRiskDial",
        "CategoryRiskDial",
        "RiskDial",
        "GraduationStatus",
        "ProposeGraduationRequest",
        # backlog reconciliation and pacing
        "ScanBacklogStatus",
        "CategoryPacingState",
        "PacingItem",
        # rules and audit
        "SaveRuleRequest",
        "RuleAuditEntry",
        # the reviewer planes
        "ReviewerAction",
        "ReviewDecisionContext",
        "ReviewerDecisionRequest",
        "ReviewerDecisionResult",
        # ours: pages, acks, merges, promotion, the snapshot and the problem
        "ReviewList",
        "ReviewTurnList",
        "CategoryList",
        "SentMessage",
        "Thread",
        "AckReviewEventRequest",
        "AckReviewEventEntry",
        "AckReviewEventResult",
        "MergeCategoriesRequest",
        "CategoryMerge",
        "PromoteRuleRequest",
        "RuleSnapshot",
        "Problem",
    ],
    "skills": ["extrovert-send-email", "extrovert-writing-rules"],
    # Which problem codes are worth repeating (after the re-read each needs), and at most how often.
    "review_problem_retryable": dict(REVIEW_PROBLEM_RETRYABLE),
    "review_problem_retry_limits": dict(REVIEW_PROBLEM_RETRY_LIMITS),
}


def package_version_matches() -> bool:
    """True when the installed distribution's PEP 440 version spells CONTRACT_VERSION."""
    core, _, pre = CONTRACT_VERSION.partition("-pre.")
    return _dist_version("reviewloop") == f"{core}rc{pre}"
