"""The undo window of a reviewer's release (issue 38), as pure rules.

A human's or a review agent's approve (or edit) is released to delivery only once ``window`` has passed;
until then its decider may take it back, and the draft is exactly as the decision found it. The window
is a time on the delivery attempt, not a timer: the attempt is recorded with the approval, unclaimed, its
claim not due before ``release_at`` (a queued attempt's lease is its next due time), so whichever
replica's worker or sweep claims it first delivers it once, a restart inside the window still delivers
it after, and an undo is the deletion of an attempt no worker has claimed yet: the claim and the undo
race on the one row, and exactly one wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from reviewloop.errors import Code, DomainError

from review_state.domain import escalation
from review_state.domain.feedback import REVIEWED
from review_state.domain.machine import CLOSED, Actor, State, allowed_actions, undo_target
from review_state.domain.pacing import StaleDraft
from review_state.domain.review import Review

# The columns a decision writes (``decision.decided`` and the release's send ids) that an undo puts back.
RESTORED = (
    "state",
    "revision",
    "subject",
    "body_text",
    "body_html",
    "decided_at",
    "review_deadline",
    "send_path",
    "rfc_message_id",
    *escalation.FIELDS,  # an approval settles an escalation; its undo puts it back
)
_TIMES = frozenset({"decided_at", "review_deadline", "escalated_at", "escalation_deadline"})
# The stale row the decision took from a draft a rule held (``Edge.released``), kept beside the columns.
_HELD = "held"
# Set when that row is a hold a rule change put there while the release waited (``held_later``): the
# release never took it from its window, so an undo has no release to take back from the window's count.
_ARRIVED = "held_arrived"


def release_at(now: datetime, window_s: float) -> datetime | None:
    """When a release decided at ``now`` goes to delivery; None: at once (the window is off)."""
    return now + timedelta(seconds=window_s) if window_s > 0 else None


def undoable(release: datetime | None, claimed: bool, now: datetime) -> bool:
    """Whether a release may still be taken back: it waits out a window that is still open and no worker
    has claimed it. Its complement is ``due``: at any moment exactly one of the two holds."""
    return release is not None and not claimed and now < release


def due(release: datetime | None, claimed: bool, now: datetime) -> bool:
    """Whether a worker may claim the release (the store's claim says the same in SQL)."""
    return not undoable(release, claimed, now)


def snapshot(before: Review, held: StaleDraft | None = None) -> dict[str, Any]:
    """What the decision found, as JSON the attempt keeps until the release is delivered or undone:
    the columns it wrote, and the stale row it took (``held``: the rule hold an override or an edit
    released, with its place in the pacing window), which an undo puts back."""
    values = {name: getattr(before, name) for name in RESTORED}
    for name in _TIMES:
        if values[name] is not None:
            values[name] = values[name].isoformat()
    values["state"] = str(before.state)
    if held is not None:
        nudged = held.nudged_at.isoformat() if held.nudged_at is not None else None
        values[_HELD] = {**asdict(held), "nudged_at": nudged}
    return values


def restored(kept: dict[str, Any], actor: Actor) -> dict[str, Any]:
    """The columns an undo writes back from ``snapshot``: the state the decision found (checked against
    the table: one ``actor``'s approval leaves from), its revision and content, no send ids."""
    values = {name: kept[name] for name in RESTORED if name in kept}
    for name in _TIMES:
        if values.get(name) is not None:
            values[name] = datetime.fromisoformat(values[name])
    state = undo_target(State(values["state"]), actor)
    if state is None:
        raise ValueError(f"an approval by the {actor} does not leave from {values['state']}")
    values["state"] = state
    return values


def held_again(kept: dict[str, Any], back: Review) -> StaleDraft | None:
    """The stale row an undo puts back, as the decision took it (None: no rule held the draft): the
    draft ``back`` is held again against the same rule, in the same place of its category's window
    (nudged and holding a slot, or waiting for one)."""
    held = kept.get(_HELD)
    if held is None:
        return None
    nudged = held["nudged_at"]
    return StaleDraft(
        **{
            **held,
            "category_id": back.category_id,  # where the draft now is (a merge moves its drafts)
            "nudged_at": datetime.fromisoformat(nudged) if nudged else None,
        }
    )


def held_later(kept: dict[str, Any], row: StaleDraft) -> dict[str, Any] | None:
    """The snapshot of a release still in its undo window once a rule change lands that would hold the
    draft were it pending (``row``), so an undo puts the draft back held against that rule; None: the
    hold it keeps is already at or past it. A hold the release took is raised to the new rule and keeps
    its place in the window (as ``store.pacing.mark_stale`` raises a pending draft's); a new one waits
    for a slot."""
    held = kept.get(_HELD)
    if held is None:
        return {**kept, _HELD: {**asdict(row), "nudged_at": None}, _ARRIVED: True}
    if held["required_high_water"] >= row.required_high_water:
        return None
    moved = ("required_high_water", "rule", "reason", "propagate", "suggested_batch")
    return {**kept, _HELD: {**held, **{name: getattr(row, name) for name in moved}}}


def released_hold(kept: dict[str, Any]) -> bool:
    """Whether the release took the hold ``held_again`` returns from its window (``pacing.free``
    counted it released), so the undo takes that count back."""
    return not kept.get(_ARRIVED, False)


def check_undoable(review: Review, actor: Actor) -> None:
    """``wrong_state`` unless ``review`` is a reviewer's release still going: ``already_released`` once
    it is closed, or a release no reviewer decided."""
    if review.state in CLOSED or (review.state is State.APPROVED and review.send_path not in REVIEWED):
        raise already_released(review, actor)
    if review.state is not State.APPROVED:
        raise DomainError(
            Code.WRONG_STATE,
            f"Nothing to undo: the review is {review.state}, not a release waiting out its undo window.",
            **facts(review, actor),
        )


def check_undoer(
    review: Review, actor: Actor, actor_id: str, decider: str | None, named: tuple[int, int]
) -> None:
    """Only the reviewer who released the draft (``decider``; None: unknown, anyone) undoes it, on the
    (revision, version) ``named`` it read."""
    if decider is not None and decider != actor_id:
        raise DomainError(
            Code.FORBIDDEN_SCOPE,
            f"Only the reviewer who released this draft ({decider}) may undo the release.",
        )
    if named != (review.revision, review.version):
        raise DomainError(
            Code.STALE,
            f"You named revision {named[0]}, version {named[1]}, but the release is at revision "
            f"{review.revision}, version {review.version}. Re-read it.",
            **facts(review, actor),
        )


def undo_note(action: str, rule_ids: Sequence[str] = ()) -> str:
    """The ``undo`` turn's body; it names the rule the decision saved, which the rules context takes
    back unless someone changed it since (then it stays as they left it)."""
    note = (
        f"Undid the {action} before it went out: the draft is back as the decision found it, "
        "and nothing was sent."
    )
    if rule_ids:
        note += (
            f" The rule it saved ({', '.join(rule_ids)}) is taken back; "
            "if it was changed since, it stays as changed."
        )
    return note


def facts(review: Review, actor: Actor) -> dict[str, Any]:
    """Where the review stands, for a refusal's problem."""
    return {
        "state": review.state,
        "revision": review.revision,
        "version": review.version,
        "allowed_actions": allowed_actions(review.state, actor),
    }


def already_released(review: Review, actor: Actor) -> DomainError:
    return DomainError(
        Code.WRONG_STATE,
        f"Too late to undo: the release has already been released to delivery (the review is {review.state}). "
        "Its undo window closed.",
        hints=(("reason", "already_released"),),
        **facts(review, actor),
    )
