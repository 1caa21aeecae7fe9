"""The review_state store: reviews, turns, messages and threads, contacts, the review policy, delivery
attempts and idempotency keys, in the domain's words. Core statements, not the ORM (DESIGN.md
"Performance budget")."""

from review_state.store.attempts import Attempt, finish_attempt, get_attempt, parked_attempts, start_attempt
from review_state.store.contacts import (
    Contact,
    SendingFacts,
    block_contact,
    get_account_policy,
    get_policy,
    mark_contacted,
    sending_facts,
    set_account_policy,
    set_policy,
    suppress_contact,
)
from review_state.store.messages import Message, add_message, get_message, message_by_rfc_id
from review_state.store.reviews import (
    add_review,
    add_turn,
    auto_send_room,
    compare_and_set,
    get_review,
    get_review_any,
    get_review_with_turns,
    get_turn,
    list_reviews,
    list_turns,
    pending_in_scope,
)
from review_state.store.tables import idempotency_keys, metadata

__all__ = [
    "Attempt",
    "Contact",
    "Message",
    "SendingFacts",
    "add_message",
    "add_review",
    "add_turn",
    "auto_send_room",
    "block_contact",
    "compare_and_set",
    "finish_attempt",
    "get_account_policy",
    "get_attempt",
    "get_message",
    "get_policy",
    "get_review",
    "get_review_any",
    "get_review_with_turns",
    "get_turn",
    "idempotency_keys",
    "list_reviews",
    "list_turns",
    "mark_contacted",
    "message_by_rfc_id",
    "metadata",
    "parked_attempts",
    "pending_in_scope",
    "sending_facts",
    "set_account_policy",
    "set_policy",
    "start_attempt",
    "suppress_contact",
]
