"""The reads, legal from every state: a review with its thread, the list, the assembled feedback."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reviewloop.errors import Code, DomainError
from reviewloop.tenancy import Principal

from review_state import store
from review_state.app._kernel import not_found
from review_state.app.env import Env
from review_state.domain.feedback import approvers, decision_of, decisions_of, in_force
from review_state.domain.review import Review, RevisionContent, Turn
from review_state.domain.submission import ThreadContext
from review_state.store import ReviewFilter

EVERY_REVIEW = ReviewFilter()  # no filter: every review of the project

LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200


async def get_review(env: Env, principal: Principal, review_id: str) -> tuple[Review, list[Turn]]:
    async with env.db.single_statement.connect() as conn:
        found = await store.get_review_with_turns(conn, principal.project_id, review_id)
    if found is None:
        raise not_found(review_id)
    return found


async def read_review(
    env: Env, principal: Principal, review_id: str
) -> tuple[Review, list[Turn], store.Attempt | None]:
    """The review as ``GetReview`` answers it: with its turns and its delivery attempt (None before
    its release), in one statement outside a transaction."""
    async with env.db.single_statement.connect() as conn:
        found = await store.get_review_with_delivery(conn, principal.project_id, review_id)
    if found is None:
        raise not_found(review_id)
    return found


async def get_revisions(env: Env, principal: Principal, review_id: str) -> list[RevisionContent]:
    """Every kept revision of the review, oldest first (a review always has its current one)."""
    async with env.db.single_statement.connect() as conn:
        revisions = await store.list_revisions(conn, principal.project_id, review_id)
    if not revisions:
        raise not_found(review_id)
    return revisions


async def list_reviews(
    env: Env, principal: Principal, filters: ReviewFilter = EVERY_REVIEW, *, cursor: str, limit: int
) -> tuple[list[Review], str]:
    if limit < 0 or limit > LIST_LIMIT_MAX:
        raise DomainError(Code.BAD_REQUEST, f"limit must be between 1 and {LIST_LIMIT_MAX}.")
    limit = limit or LIST_LIMIT_DEFAULT
    if cursor and not cursor.startswith("rr_"):
        raise DomainError(
            Code.BAD_REQUEST, "cursor is not one this service issued; pass next_cursor as given."
        )
    async with env.db.single_statement.connect() as conn:
        rows = await store.list_reviews(
            conn, principal.project_id, filters, before_id=cursor, limit=limit + 1
        )
    next_cursor = rows[limit - 1].id if len(rows) > limit else ""
    return rows[:limit], next_cursor


async def first_contacts(env: Env, principal: Principal, reviews: Sequence[Review]) -> set[str]:
    """The ids of ``reviews`` that would write to an address the project never mailed nor heard from
    (the dial's first contact): one read for the whole page."""
    recipients = {r.id: [a.lower() for a in (*r.to, *r.cc, *r.bcc)] for r in reviews}
    async with env.db.single_statement.connect() as conn:
        known = await store.contacted(
            conn, principal.project_id, [a for addresses in recipients.values() for a in addresses]
        )
    return {rid for rid, addresses in recipients.items() if any(a not in known for a in addresses)}


async def count_reviews(env: Env, principal: Principal, filters: ReviewFilter = EVERY_REVIEW) -> int:
    """Every review ``list_reviews`` pages through with these filters (the SDK's ``Page.total``)."""
    async with env.db.single_statement.connect() as conn:
        return await store.count_reviews(conn, principal.project_id, filters)


@dataclass(frozen=True)
class Feedback:
    review_id: str
    decision: str
    diff_unified: str
    diff_json: dict[str, Any] | None
    comments: list[Turn]
    new_rules: list[str]
    approvers: list[str]  # whose approval stands on the current revision (all of a quorum)


async def get_feedback(env: Env, principal: Principal, review_id: str) -> Feedback:
    """The human's assembled decision; ``decision`` is derived exactly as the ``sent`` nudge's."""
    review, turns = await get_review(env, principal, review_id)
    edits = [t for t in turns if t.turn_type == "decision" and t.diff_json is not None]
    comments = [t for t in turns if t.actor_kind in ("human", "review_agent") and t.body]
    return Feedback(
        review_id=review.id,
        decision=decision_of(decisions_of(turns)),
        diff_unified=edits[-1].diff_unified or "" if edits else "",
        diff_json=edits[-1].diff_json if edits else None,
        comments=comments,
        new_rules=[rule for t in in_force(turns) for rule in t.rule_ids],  # an undone one was taken back
        approvers=approvers(turns, review.revision),
    )


async def get_thread(env: Env, principal: Principal, thread_id: str) -> ThreadContext:
    """What a reply names as its expected thread context: the count and the newest message, read in one
    snapshot."""
    async with env.db.engine.connect() as conn:
        thread = await store.thread_context(conn, principal.project_id, thread_id)
    if thread is None:
        raise DomainError(Code.NOT_FOUND, f"No thread {thread_id} is visible to this key.")
    return thread
