"""The actor-aware review state machine of spec 000, as data.

``TRANSITIONS`` is the whole table: (state, verb, actor) -> next state. Everything else (legality,
the ``allowed_action`` hints of a 409, which states are closed) is derived from it, so a hint can
never advertise a verb that would 409. ``NUDGES`` beside it says which edge emits which nudge, and
``REFUSAL_NUDGES`` / ``RULES_NUDGES`` name the nudges that no edge emits.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from reviewloop.errors import Code, DomainError


class State(StrEnum):
    NEEDS_REVIEW = "needs_review"
    IN_REVIEW = "in_review"
    CHATTING = "chatting"
    REJECTED = "rejected"
    APPROVED = "approved"
    FAILED = "failed"
    SENT = "sent"
    AUTO_SENT = "auto_sent"
    CANCELLED = "cancelled"
    # In the enum with no producer today: nothing may write these (spec 000).
    STALE = "stale"
    STALLED = "stalled"


class Actor(StrEnum):
    COMPOSER = "composer"  # the agent that composed the draft
    HUMAN = "human"
    REVIEW_AGENT = "review_agent"
    SYSTEM = "system"


class Verb(StrEnum):
    SUBMIT_REVISION = "submit_revision"
    POST_CHAT = "post_review_chat"
    RESTAMP = "restamp_review"
    CANCEL = "cancel_review"
    OPEN = "open_review"
    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    ESCALATE = "escalate"
    # The platform's own edges.
    AUTO_SEND = "auto_send"  # a direct or graduated release: straight to delivery
    HOLD = "hold"  # a circuit breaker returns a review agent's release to the human queue
    DELIVERED = "delivered"
    AUTO_DELIVERED = "auto_delivered"
    DELIVERY_FAILED = "delivery_failed"
    # A decider takes back a release still in its undo window (``undo_target``).
    UNDO = "undo_decision"


S, V, A = State, Verb, Actor

_OPEN_FOR_HUMAN = (S.IN_REVIEW, S.CHATTING)

TRANSITIONS: dict[tuple[State, Verb, Actor], State] = {
    # The composer's edges: exactly the spec's table "What a composing agent may legally do".
    (S.NEEDS_REVIEW, V.SUBMIT_REVISION, A.COMPOSER): S.NEEDS_REVIEW,
    (S.NEEDS_REVIEW, V.POST_CHAT, A.COMPOSER): S.NEEDS_REVIEW,  # asks without opening the draft
    (S.NEEDS_REVIEW, V.RESTAMP, A.COMPOSER): S.NEEDS_REVIEW,
    (S.NEEDS_REVIEW, V.CANCEL, A.COMPOSER): S.CANCELLED,
    (S.IN_REVIEW, V.POST_CHAT, A.COMPOSER): S.CHATTING,
    (S.IN_REVIEW, V.CANCEL, A.COMPOSER): S.CANCELLED,
    (S.CHATTING, V.SUBMIT_REVISION, A.COMPOSER): S.NEEDS_REVIEW,
    (S.CHATTING, V.POST_CHAT, A.COMPOSER): S.CHATTING,
    (S.CHATTING, V.CANCEL, A.COMPOSER): S.CANCELLED,
    (S.REJECTED, V.SUBMIT_REVISION, A.COMPOSER): S.NEEDS_REVIEW,
    (S.REJECTED, V.CANCEL, A.COMPOSER): S.CANCELLED,
    (S.FAILED, V.CANCEL, A.COMPOSER): S.CANCELLED,  # the one close-out of a failed send
    # A human reviewer: picks a draft up, decides, comments, withdraws.
    (S.NEEDS_REVIEW, V.OPEN, A.HUMAN): S.IN_REVIEW,
    (S.IN_REVIEW, V.POST_CHAT, A.HUMAN): S.CHATTING,
    (S.CHATTING, V.POST_CHAT, A.HUMAN): S.CHATTING,
    **{(s, v, A.HUMAN): S.APPROVED for s in _OPEN_FOR_HUMAN for v in (V.APPROVE, V.EDIT)},
    **{(s, V.REJECT, A.HUMAN): S.REJECTED for s in _OPEN_FOR_HUMAN},
    **{(s, V.ESCALATE, A.HUMAN): S.NEEDS_REVIEW for s in _OPEN_FOR_HUMAN},
    **{
        (s, V.CANCEL, A.HUMAN): S.CANCELLED
        for s in (S.NEEDS_REVIEW, S.IN_REVIEW, S.CHATTING, S.REJECTED, S.FAILED)
    },
    # A linked review agent decides a pending draft; reject / escalate return it to the human queue.
    **{(S.NEEDS_REVIEW, v, A.REVIEW_AGENT): S.APPROVED for v in (V.APPROVE, V.EDIT)},
    **{(S.NEEDS_REVIEW, v, A.REVIEW_AGENT): S.NEEDS_REVIEW for v in (V.REJECT, V.ESCALATE)},
    # The platform: graduated / direct release, breakers, delivery outcomes. `approved` is transient.
    (S.NEEDS_REVIEW, V.AUTO_SEND, A.SYSTEM): S.APPROVED,
    (S.NEEDS_REVIEW, V.HOLD, A.SYSTEM): S.NEEDS_REVIEW,
    (S.APPROVED, V.DELIVERED, A.SYSTEM): S.SENT,
    (S.APPROVED, V.AUTO_DELIVERED, A.SYSTEM): S.AUTO_SENT,
    (S.APPROVED, V.DELIVERY_FAILED, A.SYSTEM): S.FAILED,
}


class Reason(StrEnum):
    """Every nudge reason review_state emits (spec 000 "Every reason that is emitted"). ``staleness``
    and ``approved`` are reserved there and never emitted."""

    REDRAFT_REQUESTED = "redraft_requested"
    FEEDBACK_ADDED = "feedback_added"
    REJECTED = "rejected"
    RULE_CHANGED = "rule_changed"
    RECHECK_CATEGORY = "recheck_category"
    PROPAGATE_GENERAL_RULE = "propagate_general_rule"
    SENT = "sent"
    SEND_FAILED = "send_failed"
    CANCELLED = "cancelled"
    FRONT_RUN_NEXT = "front_run_next"


R = Reason

# Which edge emits which nudge: (verb, actor) of a TRANSITIONS key -> reason, whatever state the edge
# leaves. An edge that is not here emits nothing (an open, a revision, a restamp, an approval:
# `approved` is transient, its terminal nudge is `sent` or `send_failed`).
NUDGES: dict[tuple[Verb, Actor], Reason] = {
    (V.CANCEL, A.COMPOSER): R.CANCELLED,  # unconditionally, even for the agent's own cancel
    (V.CANCEL, A.HUMAN): R.CANCELLED,
    (V.POST_CHAT, A.HUMAN): R.FEEDBACK_ADDED,  # the composer's own question emits nothing
    (V.REJECT, A.HUMAN): R.REJECTED,
    (V.REJECT, A.REVIEW_AGENT): R.REDRAFT_REQUESTED,
    (V.ESCALATE, A.HUMAN): R.REDRAFT_REQUESTED,
    (V.ESCALATE, A.REVIEW_AGENT): R.REDRAFT_REQUESTED,
    (V.HOLD, A.SYSTEM): R.REDRAFT_REQUESTED,  # by the breaker, naming it
    # Both flavours of `sent`: the payload's state is `sent` (with the decision) or `auto_sent`
    # (with the gate outcome).
    (V.DELIVERED, A.SYSTEM): R.SENT,
    (V.AUTO_DELIVERED, A.SYSTEM): R.SENT,
    (V.DELIVERY_FAILED, A.SYSTEM): R.SEND_FAILED,
}

# Nudges that depend on more than an edge. A refused verb moves nothing, yet the agent learns why:
REFUSAL_NUDGES: dict[Code, Reason] = {
    Code.TERMINAL: R.FRONT_RUN_NEXT,  # what actually happened to the review it chased
    Code.BORN_STALE: R.RULE_CHANGED,  # with `born_stale`: the rules moved under the redraft
}
# ... and a change in the rules context nudges every pending draft in its scope.
RULES_NUDGES: dict[str, Reason] = {
    "category_rule": R.RULE_CHANGED,
    "general_rule": R.PROPAGATE_GENERAL_RULE,  # with the siblings and a small suggested_batch
    "category": R.RECHECK_CATEGORY,  # graduated, demoted or reconciled
}

TERMINAL = frozenset({S.SENT, S.AUTO_SENT, S.CANCELLED})
# `failed` is closed too: nothing re-approves it, so waiting on it would wait forever.
CLOSED = TERMINAL | {S.FAILED}
# Drafts a rule change or a graduation may still affect.
PENDING = frozenset({S.NEEDS_REVIEW, S.IN_REVIEW, S.CHATTING, S.REJECTED})

# Reads legal from every state: why a 409's hints are never empty.
READ_VERBS = ("get_review", "list_review_events")


def undo_target(prior: State, actor: Actor) -> State | None:
    """Where an undone release returns: the state its approval found the draft in, when that is one the
    ``actor``'s approve edge leaves from (None: nothing to return to). Not an edge of ``TRANSITIONS``:
    an undo is legal only while the release waits out its undo window, a matter of the clock and not
    of the state, so no 409's hints advertise it."""
    return prior if TRANSITIONS.get((prior, V.APPROVE, actor)) is S.APPROVED else None


def allowed_actions(state: State, actor: Actor) -> list[str]:
    """The verbs ``actor`` may use from ``state``, then the reads that are always legal."""
    verbs = [verb.value for (s, verb, a) in TRANSITIONS if s is state and a is actor]
    return [*dict.fromkeys(verbs), *READ_VERBS]


def next_state(state: State, verb: Verb, actor: Actor) -> State | None:
    return TRANSITIONS.get((state, verb, actor))


class Position(Protocol):
    """Where a review stands, as far as the table is concerned (a ``review.Review`` is one)."""

    @property
    def state(self) -> State: ...
    @property
    def revision(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def message_id(self) -> str | None: ...


def check_transition(
    review: Position,
    verb: Verb,
    actor: Actor,
    *,
    parent_revision: int | None = None,
    expected_version: int | None = None,
) -> State:
    """The next state, or the 409 the spec names: ``terminal``, ``wrong_state`` for an approved review (its
    send is in flight; see ``parked``), then ``stale``, then ``wrong_state``. ``parent_revision`` None
    names no revision (chat, the platform's own edges): the review's own is taken."""
    state, revision, version = review.state, review.revision, review.version
    if parent_revision is None:
        parent_revision = revision
    if state in TERMINAL:
        raise _terminal(review, actor)
    target = next_state(state, verb, actor)
    if state is S.APPROVED and target is None:
        # Spec 000: from `approved`, "nothing: it is being delivered". A send merely in flight is a
        # wrong_state; the caller that knows its attempt is parked names it `send_needs_reconciliation`
        # (``parked``).
        raise DomainError(
            Code.WRONG_STATE,
            f"{verb} is not legal while the review is approved: it is being delivered. Nothing mutates it "
            "now; poll get_review and wait for the terminal event.",
            state=state,
            revision=revision,
            version=version,
            allowed_actions=allowed_actions(state, actor),
        )
    if parent_revision != revision or (expected_version is not None and expected_version != version):
        named = f"revision {parent_revision}" + (
            f", version {expected_version}" if expected_version is not None else ""
        )
        raise DomainError(
            Code.STALE,
            f"You named {named}, but the review is at revision {revision}, version {version}. "
            "Re-read it, re-apply your change on top, and resubmit with the current revision.",
            state=state,
            revision=revision,
            version=version,
            allowed_actions=allowed_actions(state, actor),
        )
    if target is None:
        raise DomainError(
            Code.WRONG_STATE,
            f"{verb} is not legal for the {actor} while the review is {state}; "
            "use one of the allowed actions.",
            state=state,
            revision=revision,
            version=version,
            allowed_actions=allowed_actions(state, actor),
        )
    return target


def _terminal(review: Position, actor: Actor) -> DomainError:
    return DomainError(
        Code.TERMINAL,
        f"The review is already {review.state}; nothing will mutate it. Read it, and drain the "
        "front_run_next event that reports what happened.",
        state=review.state,
        allowed_actions=allowed_actions(review.state, actor),
        sent_message_id=review.message_id,
    )


def parked(error: DomainError) -> DomainError:
    """``error`` (the ``wrong_state`` of a verb on an approved review) as the review's delivery attempt is
    parked for recovery by Message-ID: ``send_needs_reconciliation``, the one 409 of an approved review
    that is not merely in flight, with the same recovery facts."""
    return DomainError(
        Code.SEND_NEEDS_RECONCILIATION,
        "The review is approved and its send attempt is parked for recovery by Message-ID: its outcome is "
        "unknown. Do not resend: poll get_review and wait for the terminal event.",
        state=error.state,
        revision=error.revision,
        version=error.version,
        allowed_actions=list(error.allowed_actions),
    )
