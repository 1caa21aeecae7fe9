"""review_state use cases: one function per RPC, each one unit of work around the table's edge.

Calls to other contexts (rules, diff, dispatch_budget) happen before the transaction that writes, so a
peer that is down fails the request closed with ``unavailable`` and nothing is written. Delivery is the
one use case with two transactions around an I/O call (``delivery``). The modules, by plane:
``submission`` (submit), ``composer`` (cancel, redraft, restamp, chat), ``reviewer`` (open, decide),
``delivery`` (the durable delivery step: deliver, reconcile, resolve_delivery), ``undo`` (a release's
undo window), ``reads``, ``console``, ``ingest`` (events from rules)
and ``pacing`` (backlog reconciliation: stale drafts held, nudged a window at a time); they run
on ``_kernel`` (load, check, CAS, Idempotency-Key, refusals), ``_gates`` and ``_events``.
"""

from review_state.app.composer import cancel, post_chat, restamp, submit_revision
from review_state.app.console import (
    add_block,
    add_suppression,
    get_policy,
    list_contacts,
    record_inbound,
    remove_block,
    remove_suppression,
    require_composition_token,
    set_account_policy,
    set_policy,
    set_require_composition_token,
)
from review_state.app.delivery import (
    deliver,
    delivery_status,
    get_delivery,
    reconcile,
    resolve_delivery,
)
from review_state.app.dial_effect import DialEffect, get_dial_effect
from review_state.app.env import Env, Settings
from review_state.app.ingest import SUBSCRIPTIONS, ingest
from review_state.app.pacing import PacingState, pacing_state
from review_state.app.preview import Preview, preview_message
from review_state.app.reads import (
    Feedback,
    count_reviews,
    first_contacts,
    get_feedback,
    get_review,
    get_revisions,
    get_thread,
    list_reviews,
    read_review,
)
from review_state.app.reviewer import (
    ReviewerResult,
    decide,
    open_review,
    reviewer_decide,
    sweep_review_deadlines,
)
from review_state.app.submission import SubmitRequest, submit
from review_state.app.undo import undo_decision
from review_state.domain.decision import Decision
from review_state.domain.revision import RestampRequest, Revision, SubmitRevisionRequest
from review_state.store import ReviewFilter

__all__ = [
    "SUBSCRIPTIONS",
    "Decision",
    "DialEffect",
    "Env",
    "Feedback",
    "PacingState",
    "Preview",
    "RestampRequest",
    "ReviewFilter",
    "ReviewerResult",
    "Revision",
    "Settings",
    "SubmitRequest",
    "SubmitRevisionRequest",
    "add_block",
    "add_suppression",
    "cancel",
    "count_reviews",
    "decide",
    "deliver",
    "delivery_status",
    "first_contacts",
    "get_delivery",
    "get_dial_effect",
    "get_feedback",
    "get_policy",
    "get_review",
    "get_revisions",
    "get_thread",
    "ingest",
    "list_contacts",
    "list_reviews",
    "open_review",
    "pacing_state",
    "post_chat",
    "preview_message",
    "read_review",
    "reconcile",
    "record_inbound",
    "remove_block",
    "remove_suppression",
    "require_composition_token",
    "resolve_delivery",
    "restamp",
    "reviewer_decide",
    "set_account_policy",
    "set_policy",
    "set_require_composition_token",
    "submit",
    "submit_revision",
    "sweep_review_deadlines",
    "undo_decision",
]
