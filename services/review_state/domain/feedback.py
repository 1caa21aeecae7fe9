"""How a review's decision reads: one derivation, used by the ``sent`` nudge and ``get_review_feedback``
alike, so the two can never disagree (spec 000)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from review_state.domain.machine import Verb
from review_state.domain.review import Facts, Move, Review, Turn

APPROVING = ("approve", "edit")  # an edit is its author's approval of the revision it wrote


@dataclass(frozen=True)
class DecisionTurn:
    action: str  # approve | edit | reject | escalate
    changed: bool  # the edit actually changed subject or body
    revision: int = 0  # the revision the decision left (an edit's is the one it wrote)


UNDO = "undo"  # the turn of a decider who took back a release in its undo window


def in_force(turns: Sequence[Turn]) -> list[Turn]:
    """The thread less the decisions their deciders undid: an ``undo`` turn voids the latest decision
    before it that stands (the release it took back), so an undone approval counts toward no quorum and
    no outcome."""
    voided: set[str] = set()
    standing: list[str] = []
    for t in turns:
        if t.turn_type == "decision":
            standing.append(t.id)
        elif t.turn_type == UNDO and standing:
            voided.add(standing.pop())
    return [t for t in turns if t.id not in voided] if voided else list(turns)


def decisions_of(turns: Sequence[Turn]) -> list[DecisionTurn]:
    """The reviewer decisions of a review's thread that stand, oldest first."""
    return [
        DecisionTurn(t.action, t.changed, t.revision) for t in in_force(turns) if t.turn_type == "decision"
    ]


def decision_of(decisions: Sequence[DecisionTurn]) -> str:
    """``edited`` when a reviewer's edit wrote the revision the last approval released (under a
    quorum, others approve that edit after it), ``approved`` when it went out as the composer wrote
    it (an edit that changed nothing included), ``rejected`` / ``escalated``, else ``none``."""
    if not decisions:
        return "none"
    last = decisions[-1]
    if last.action in APPROVING:
        edited = any(d.action == "edit" and d.changed and d.revision == last.revision for d in decisions)
        return "edited" if edited else "approved"
    return {"reject": "rejected", "escalate": "escalated"}.get(last.action, "none")


def approvers(turns: Sequence[Turn], revision: int, *, review_agent_counts: bool = True) -> list[str]:
    """The distinct actors whose approval stands on ``revision``, in the order they gave it (issue 19's
    quorum). An approval of an older revision is void, as a stale approval is on code review; the
    same approver twice counts once."""
    kinds = ("human", "review_agent") if review_agent_counts else ("human",)
    return list(
        dict.fromkeys(
            t.actor_id
            for t in in_force(turns)
            if t.turn_type == "decision"
            and t.action in APPROVING
            and t.revision == revision
            and t.actor_kind in kinds
        )
    )


def panel(turns: Sequence[Turn]) -> list[str]:
    """The distinct humans who decided the draft (any verb, any revision), in the order they first did:
    the panel a category's ``quorum_panel`` bounds."""
    return list(
        dict.fromkeys(t.actor_id for t in turns if t.turn_type == "decision" and t.actor_kind == "human")
    )


def outcome_for_rules(decision: str) -> str | None:
    """The review outcome the rules context counts per category: approval, drift, rejection."""
    return {"approved": "clean_approval", "edited": "drift", "rejected": "rejection"}.get(decision)


# The releases a reviewer decided; a direct or graduated one has no decider (nor undo).
REVIEWED = ("human_reviewed", "reviewer_approved")


def delivered_move(
    review: Review, turns: Sequence[Turn], send_path: str, message_id: str, now: datetime
) -> Move:
    """The platform's move once the provider accepted the release of ``review`` (sent by ``send_path`` as
    ``message_id``): a reviewed release is ``sent``, a direct or graduated one ``auto_sent``; its nudge
    says how the decisions read and whose approval released the final revision."""
    return Move(
        Verb.DELIVERED if send_path in REVIEWED else Verb.AUTO_DELIVERED,
        facts=Facts(
            decision=decision_of(decisions_of(turns)),
            approvers=tuple(approvers(turns, review.revision)),
        ),
        changed=replace(review, message_id=message_id, sent_at=now, updated_at=now),
    )
