"""The contract version and manifest (spec 000, "Version"): one value on every surface."""

from importlib.metadata import version as _dist_version
from typing import Final

CONTRACT_VERSION: Final = "0.1.0-pre.6"

CONTRACT_MANIFEST: Final = {
    "version": CONTRACT_VERSION,
    "stability": "provisional",
    "kind": "sdk+skill-contract",
    "core_shapes": ["ReviewIntent", "ReviewFeedback", "DiffJson", "Rule", "ReviewEvent"],
    "shapes": [
        "ReviewIntent",
        "ReviewFeedback",
        "DiffJson",
        "DiffHunk",
        "Rule",
        "ReviewEvent",
        "Review",
        "ReviewChatRequest",
        "Category",
        "GraduationStatus",
        "RiskDial",
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
