"""The contract version and manifest (spec 000, "Version"): one value on every surface."""

from importlib.metadata import version as _dist_version
from typing import Final

CONTRACT_VERSION: Final = "0.1.0-pre.6"

# Every shape by the SDK's type name (spec/SDK.md: the SDK is the reference where the spec is silent).
# The SDK's names this surface does not serve yet (RuleAuditEntry, LearnedReviewRule, the commerce plane)
# are left out rather than promised; ``Page<Review>`` is ``ReviewList`` here.
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
        # submit and reads
        "Review",
        "ReviewTurn",
        "ReviewTurnList",
        "ReviewDecisionContext",
        "ReviewList",
        "SubmitForReviewResult",
        "SentMessage",
        # review events
        "ReviewEventsResult",
        "ReviewEventCursor",
        "AckReviewEventRequest",
        "AckReviewEventEntry",
        "AckReviewEventResult",
        # chat, revision, restamp, cancel
        "PostReviewChatRequest",
        "SubmitRevisionRequest",
        "RestampReviewRequest",
        # categories
        "Category",
        "CategoryList",
        "ProposeCategoryRequest",
        "UpdateCategoryRequest",
        "MergeCategoriesRequest",
        "CategoryMerge",
        # graduation and the risk dial
        "CategoryRiskDial",
        "RiskDial",
        "GraduationStatus",
        "ProposeGraduationRequest",
        # backlog reconciliation and pacing
        "ScanBacklogStatus",
        "CategoryPacingState",
        "PacingItem",
        # rules
        "RuleSnapshot",
        "SaveRuleRequest",
        "LearnReviewRuleRequest",
        "PromoteRuleRequest",
        # the reviewer planes
        "ReviewerDecisionRequest",
        "ReviewerDecisionResult",
        "Problem",
    ],
    "skills": ["extrovert-send-email", "extrovert-writing-rules"],
}


def package_version_matches() -> bool:
    """True when the installed distribution's PEP 440 version spells CONTRACT_VERSION."""
    core, _, pre = CONTRACT_VERSION.partition("-pre.")
    return _dist_version("reviewloop") == f"{core}rc{pre}"
