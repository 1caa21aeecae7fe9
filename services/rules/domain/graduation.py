"""Graduation rungs, the maturity gate and drift demotion (spec 000, D16). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Rung(StrEnum):
    SUPERVISED = "supervised"
    AUTO_NOTIFY = "auto_notify"
    AUTO_SILENT = "auto_silent"


LADDER = (Rung.SUPERVISED, Rung.AUTO_NOTIFY, Rung.AUTO_SILENT)


def next_rung(state: Rung) -> Rung | None:
    index = LADDER.index(state)
    return LADDER[index + 1] if index + 1 < len(LADDER) else None


def rung_below(state: Rung) -> Rung | None:
    index = LADDER.index(state)
    return LADDER[index - 1] if index > 0 else None


class Outcome(StrEnum):
    CLEAN_APPROVAL = "clean_approval"
    DRIFT = "drift"
    REJECTION = "rejection"


@dataclass(frozen=True)
class Maturity:
    """A category's rung and the counters gathered since it entered that rung."""

    state: Rung
    never_graduate: bool
    clean_approval_count: int
    drift_count: int
    age_hours: float


@dataclass(frozen=True)
class Status:
    category_id: str
    state: Rung
    next_state: Rung | None
    never_graduate: bool
    clean_approval_count: int
    graduate_min_approvals: int
    approvals_met: bool
    age_hours: float
    graduate_min_age_hours: float
    age_met: bool
    maturity_gate_met: bool
    drift_count: int
    drift_demote_after: int
    can_graduate: bool


def status(category_id: str, maturity: Maturity, dial: dict[str, Any]) -> Status:
    """Progress toward the next rung. ``can_graduate`` is whether a human's graduate would succeed now:
    a next rung, no lock, and the maturity gate (approvals + age in the rung) met, on every rung (the
    spec's canonical status: supervised -> auto_notify, gate unmet, ``can_graduate: false``)."""
    approvals_met = maturity.clean_approval_count >= dial["graduate_min_approvals"]
    age_met = maturity.age_hours >= dial["graduate_min_age_hours"]
    gate = approvals_met and age_met
    upcoming = next_rung(maturity.state)
    can = upcoming is not None and not maturity.never_graduate and gate
    return Status(
        category_id=category_id,
        state=maturity.state,
        next_state=upcoming,
        never_graduate=maturity.never_graduate,
        clean_approval_count=maturity.clean_approval_count,
        graduate_min_approvals=dial["graduate_min_approvals"],
        approvals_met=approvals_met,
        age_hours=round(maturity.age_hours, 2),
        graduate_min_age_hours=dial["graduate_min_age_hours"],
        age_met=age_met,
        maturity_gate_met=gate,
        drift_count=maturity.drift_count,
        drift_demote_after=dial["drift_demote_after"],
        can_graduate=can,
    )


def after_outcome(
    maturity: Maturity, outcome: Outcome, drift_demote_after: int
) -> tuple[int, int, Rung | None]:
    """The counters after ``outcome`` and the rung to demote to, if drift reached the dial's limit.

    A rejection is drift too: the draft did not survive review as written.
    """
    clean, drift = maturity.clean_approval_count, maturity.drift_count
    if outcome is Outcome.CLEAN_APPROVAL:
        return clean + 1, drift, None
    drift += 1
    if drift >= drift_demote_after:
        below = rung_below(maturity.state)
        if below is not None:
            return clean, drift, below
    return clean, drift, None
