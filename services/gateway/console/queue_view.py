"""The console's reads of the project's drafts (issue 38): its listings (the queue's with the first-contact
badge, the split of mail sent without review), the drafts a rule holds, the category names, one review,
and the words every page uses for a draft and a decision. Each is one service call per page, however long
the queue: first contact is one read of the project's contacts for the whole page (review_state)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from reviewloop.errors import DomainError
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import ReviewListQuery

from gateway.commands import reviews as commands
from gateway.commands import rules as rule_commands
from gateway.console import web
from gateway.console.sessions import Session
from gateway.console.undo import NOTES
from gateway.translate.reviews import as_review

LISTED = 200  # a page of the queue: the service's own bound on one listing
# The drafts a human can act on, oldest first.
PENDING = ("needs_review", "in_review", "chatting")
PAST = {"approve": "Approved", "edit": "Edited and approved", "reject": "Rejected", "escalate": "Escalated"}


@dataclass(frozen=True)
class Listing:
    reviews: list[dict[str, Any]]  # oldest first
    first_contact: frozenset[str]  # ids of the drafts to a recipient the project never mailed nor heard from


def query(states: Iterable[str], category_id: str = "", **filters: Any) -> ReviewListQuery:
    """A console listing's ask, as the REST route's query: a page of ``LISTED`` unless ``limit`` says."""
    return web.shaped(
        ReviewListQuery, state=list(states), category_id=category_id, **{"limit": LISTED, **filters}
    )


async def list_reviews(
    request: Request,
    session: Session,
    asked: ReviewListQuery,
    *,
    parked: bool = False,
    with_first_contact: bool = False,
) -> review_pb2.ListReviewsResponse:
    """The console's listings: the REST route's ``list_reviews`` command (newest first, as the service
    answers), with the console's own parked and first-contact asks."""
    return await commands.list_reviews(
        web.backend(request), session.principal, asked, parked=parked, with_first_contact=with_first_contact
    )


async def listed(request: Request, session: Session, asked: ReviewListQuery) -> list[dict[str, Any]]:
    """A listing's drafts as the pages show them, newest first."""
    return [as_review(r) for r in (await list_reviews(request, session, asked)).reviews]


async def listing(request: Request, session: Session, states: list[str], category_id: str = "") -> Listing:
    reply = await list_reviews(request, session, query(states, category_id), with_first_contact=True)
    return Listing(
        reviews=[as_review(r) for r in reversed(reply.reviews)],
        first_contact=frozenset(reply.first_contact_review_ids),
    )


async def sent_without_review(
    request: Request, session: Session, category_id: str, *, rows: bool
) -> tuple[list[dict[str, Any]], int]:
    """The auto-sent drafts (no human reviewed them), oldest first when ``rows`` (the split is shown),
    and how many there are."""
    asked = query(["auto_sent"], category_id, limit=LISTED if rows else 1)
    reply = await list_reviews(request, session, asked)
    return ([as_review(r) for r in reversed(reply.reviews)] if rows else []), reply.total


async def pending_oldest_first(
    request: Request, session: Session, category_id: str = ""
) -> list[dict[str, Any]]:
    return list(reversed(await listed(request, session, query(PENDING, category_id))))


async def category_names(request: Request, session: Session) -> dict[str, str]:
    """The project's categories, id -> name (the queue shows and filters by name)."""
    reply = await rule_commands.list_categories(web.backend(request), session.principal)
    return {c.id: c.name for c in reply.categories}


async def held_by_rule(
    request: Request, session: Session, category_ids: set[str]
) -> dict[str, review_pb2.PacedDraft]:
    """The drafts a rule holds (born_stale: composed under older rules, waiting for their agent to
    re-apply them), by review id: one pacing read per category named, however long the queue."""
    backend = web.backend(request)
    replies = await asyncio.gather(
        *(commands.pacing_state(backend, session.principal, c) for c in sorted(category_ids))
    )
    return {
        d.review_id: d for reply in replies for d in reply.drafts if d.required_high_water > d.rule_high_water
    }


async def get_review(request: Request, session: Session, review_id: str) -> dict[str, Any]:
    reply = await commands.get_review(web.backend(request), session.principal, review_id)
    return {**as_review(reply), "approvers": list(reply.approvers)}


def summary(review: dict[str, Any]) -> str:
    intent = review.get("intent") or {}
    return str(intent.get("summary") or review["subject"] or review["id"])


def recipients(review: dict[str, Any]) -> str:
    return ", ".join([*review["to"], *review["cc"], *review["bcc"]])


async def announcement(request: Request, session: Session) -> str:
    """What the page says once it loads (the live region, shown as a toast): the outcome of the decision
    that led here, naming the draft by its intent."""
    done, prev = request.query_params.get("done", ""), request.query_params.get("prev", "")
    if done in PAST and prev:
        try:
            decided = summary(await get_review(request, session, prev))
        except DomainError:
            return f"{PAST[done]} {prev}."
        return f"{PAST[done]} “{decided}” ({prev})."
    if done == "open":
        return "Opened for review; you have it now."
    if done == "resolved":
        return "Delivery closed; the resolution is recorded."
    if done in NOTES:
        return NOTES[done]
    return ""
