"""The brand-risk dial: account defaults, per-category overrides where an unset (null) field
inherits, and the values in force. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reviewloop.errors import invalid

# The built-in account defaults (spec 000's example dial).
DEFAULTS: dict[str, Any] = {
    "min_confidence": 0.7,
    "first_contact_gate": True,
    "drift_demote_after": 3,
    "canary_rate": 0.1,
    "graduate_min_approvals": 20,
    "graduate_min_age_hours": 48,
    "auto_send_cap_per_day": 200,
    # Review settings (issue 19): how many distinct approvers a draft of the category needs on its
    # current revision (1: one reviewer decides), whether a review agent's approval counts as one,
    # and the minutes a review agent has to decide before the draft is forced to a human (0: none).
    "quorum_approvals": 1,
    "quorum_review_agent": False,
    "review_deadline_minutes": 0,
    # The panel: at most this many distinct humans decide a draft of the category (0: any number).
    "quorum_panel": 0,
}
FIELDS = tuple(DEFAULTS)
_BOOLEANS = ("first_contact_gate", "quorum_review_agent")
_AT_LEAST_ONE = ("drift_demote_after", "quorum_approvals")


def _check(pointer: str, name: str, value: Any) -> Any:
    """A value of the right type and range, or ``bad_request`` naming the field."""
    if name in _BOOLEANS:
        if not isinstance(value, bool):
            raise invalid(pointer, "must be true or false")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(pointer, "must be a number")
    if name in ("min_confidence", "canary_rate"):
        if not 0 <= value <= 1:
            raise invalid(pointer, "must be between 0 and 1")
        return float(value)
    if name == "graduate_min_age_hours":
        if value < 0:
            raise invalid(pointer, "must be 0 or more")
        return value
    if value != int(value):
        raise invalid(pointer, "must be a whole number")
    low = 1 if name in _AT_LEAST_ONE else 0
    if value < low:
        raise invalid(pointer, f"must be {low} or more")
    return int(value)


def validate(values: Mapping[str, Any], pointer: str) -> dict[str, Any]:
    """Checked values; ``None`` is kept (it means inherit / reset)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in DEFAULTS:
            raise invalid(f"{pointer}/{name}", f"unknown dial field; one of {', '.join(FIELDS)}")
        out[name] = None if value is None else _check(f"{pointer}/{name}", name, value)
    return out


def check_panel(values: Mapping[str, Any], pointer: str) -> None:
    """``bad_request`` unless a set panel (N) can hold the quorum (M <= N): a panel smaller than the
    approvals a draft needs would leave every draft of the category undecidable."""
    panel, needed = values["quorum_panel"], values["quorum_approvals"]
    if panel and needed > panel:
        raise invalid(
            f"{pointer}/quorum_panel",
            f"a panel of {panel} cannot give the {needed} approvals quorum_approvals asks for; "
            "set quorum_panel to 0 (any number) or at least quorum_approvals",
        )


def account_in_force(stored: Mapping[str, Any]) -> dict[str, Any]:
    return {name: stored[name] if stored.get(name) is not None else DEFAULTS[name] for name in FIELDS}


def effective(account: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every value in force for a category: its override where set, else the account's."""
    return {name: overrides[name] if overrides.get(name) is not None else account[name] for name in FIELDS}
