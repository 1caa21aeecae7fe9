"""The queue's triage facts (issue 38): its listing with the first-contact badge, and the split of mail
sent without review. Each is one service call per page, however long the queue: first contact is one read
of the project's contacts for the whole page (review_state)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import ReviewListQuery

from gateway.commands import reviews as commands
from gateway.console import web
from gateway.console.sessions import Session
from gateway.translate.reviews import as_review

LISTED = 200  # a page of the queue: the service's own bound on one listing


@dataclass(frozen=True)
class Listing:
    reviews: list[dict[str, Any]]  # oldest first
    first_contact: frozenset[str]  # ids of the drafts to a recipient the project never mailed nor heard from


async def list_reviews(
    request: Request,
    session: Session,
    states: list[str],
    category_id: str = "",
    *,
    limit: int = LISTED,
    humans_notified: bool = False,
    escalated: bool = False,
    escalated_to: str = "",
    overdue: bool = False,
    parked: bool = False,
    with_first_contact: bool = False,
) -> review_pb2.ListReviewsResponse:
    """The console's listings: the REST route's ``list_reviews`` command (newest first, as the service
    answers), with the console's own parked and first-contact asks."""
    query = web.shaped(
        ReviewListQuery,
        state=states,
        category_id=category_id,
        limit=limit,
        humans_notified=humans_notified,
        escalated=escalated,
        escalated_to=escalated_to,
        overdue=overdue,
    )
    return await commands.list_reviews(
        web.backend(request), session.principal, query, parked=parked, with_first_contact=with_first_contact
    )


async def listing(request: Request, session: Session, states: list[str], category_id: str = "") -> Listing:
    reply = await list_reviews(request, session, states, category_id, with_first_contact=True)
    return Listing(
        reviews=[as_review(r) for r in reversed(reply.reviews)],
        first_contact=frozenset(reply.first_contact_review_ids),
    )


async def sent_without_review(
    request: Request, session: Session, category_id: str, *, rows: bool
) -> tuple[list[dict[str, Any]], int]:
    """The auto-sent drafts (no human reviewed them), oldest first when ``rows`` (the split is shown),
    and how many there are."""
    reply = await list_reviews(request, session, ["auto_sent"], category_id, limit=LISTED if rows else 1)
    return ([as_review(r) for r in reversed(reply.reviews)] if rows else []), reply.total
