"""The review queue: its splits and rows, and its live updates over server-sent events (each change to a
draft of the project, and who has which draft open)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from reviewloop.review.v1 import review_pb2
from starlette.responses import Response, StreamingResponse

from gateway.commands.reviews import STATES
from gateway.console import escalation, presence, queue_view, web
from gateway.console.html import page, render
from gateway.console.queue_view import PENDING, query, recipients, summary
from gateway.console.sessions import Session
from gateway.console.undo import undo_toast
from gateway.console.warnings import warnings
from gateway.translate.reviews import as_review

router = APIRouter()

SPLITS = {
    "": "All pending",
    escalation.SPLIT: escalation.LABEL,
    "needs_review": "Needs review",
    "in_review": "Being reviewed",
    "escalated": "Escalated",
    "overdue": "Overdue",
    "held": "Held by a rule",
    "parked": "Parked sends",
    "auto_sent": "Sent without review",
}
AUTO_NOTIFIED_SHOWN = 20
LIVE_POLL_S = 1.0


def _split_of(review: dict[str, Any], held: Mapping[str, Any]) -> set[str]:
    """The splits a pending draft belongs to."""
    out = {"", "held" if review["id"] in held else review["state"]}
    if review["state"] == "chatting":
        out.add("in_review")
    return out


@dataclass(frozen=True)
class _Read:
    """What one queue page reads: the listing, each split's drafts and counts, and the names and marks its
    rows show."""

    listing: queue_view.Listing
    escalated: frozenset[str]  # the escalated pending drafts: a split and a badge
    overdue: review_pb2.ListReviewsResponse  # those past their escalation deadline
    parked: review_pb2.ListReviewsResponse  # their count, and the split's rows when it is shown
    mine: review_pb2.ListReviewsResponse  # escalated to the signed-in key or its role
    auto_sent: tuple[list[dict[str, Any]], int]
    names: dict[str, str]
    open_by: dict[str, list[str]]
    held: dict[str, review_pb2.PacedDraft]
    who: web.Actors
    auto_notified: list[dict[str, Any]]


async def _read(request: Request, session: Session, states: list[str], category: str, split: str) -> _Read:
    listing, escalated, overdue, parked, mine, auto_sent = await asyncio.gather(
        queue_view.listing(request, session, states, category),
        queue_view.list_reviews(request, session, query(PENDING, category, escalated=True)),
        queue_view.list_reviews(request, session, query(PENDING, category, overdue=True)),
        queue_view.list_reviews(
            request,
            session,
            query([], category, limit=queue_view.LISTED if split == "parked" else 1),
            parked=True,
        ),
        escalation.escalated_to_me(request, session, PENDING, category),
        queue_view.sent_without_review(request, session, category, rows=split == "auto_sent"),
    )
    held_in = {r.get("category_id") or "" for r in listing.reviews if r["state"] in PENDING}
    names, open_by, held, who, auto_notified = await asyncio.gather(
        queue_view.category_names(request, session),
        presence.by_review(request, session),
        queue_view.held_by_rule(request, session, held_in),
        web.actors(request, session),
        queue_view.listed(
            request, session, query([], category, humans_notified=True, limit=AUTO_NOTIFIED_SHOWN)
        ),
    )
    return _Read(
        listing=listing,
        escalated=frozenset(r.id for r in escalated.reviews),
        overdue=overdue,
        parked=parked,
        mine=mine,
        auto_sent=auto_sent,
        names=names,
        open_by=open_by,
        held=held,
        who=who,
        auto_notified=auto_notified,
    )


def _counts(read: _Read) -> dict[str, int]:
    """How many drafts each split holds."""
    counts = {name: 0 for name in SPLITS}
    for review in read.listing.reviews:
        if review["state"] in PENDING:
            for name in _split_of(review, read.held):
                counts[name] = counts.get(name, 0) + 1
            if review["id"] in read.escalated:
                counts["escalated"] += 1
    counts["parked"] = read.parked.total
    counts[escalation.SPLIT] = read.mine.total
    counts["overdue"] = read.overdue.total
    counts["auto_sent"] = read.auto_sent[1]
    return counts


def _shown(read: _Read, split: str) -> list[dict[str, Any]]:
    """The drafts of the split asked for; the escalated reviewer sees theirs first."""
    listed = read.listing.reviews
    mine = {r.id for r in read.mine.reviews}
    by_id = {
        "escalated": read.escalated,
        escalation.SPLIT: mine,
        "overdue": {r.id for r in read.overdue.reviews},
    }
    if split in by_id:
        reviews = [r for r in listed if r["id"] in by_id[split]]
    elif split == "parked":
        reviews = [as_review(r) for r in reversed(read.parked.reviews)]
    elif split == "auto_sent":
        reviews = read.auto_sent[0]
    else:
        reviews = [r for r in listed if split in _split_of(r, read.held)] if split else listed
    return escalation.mine_first(reviews, mine)


def _category_of(names: Mapping[str, str], review: dict[str, Any]) -> str:
    category_id = str(review.get("category_id") or "")
    return str(names.get(category_id, category_id or "—"))


def _row(read: _Read, review: dict[str, Any]) -> dict[str, Any]:
    escalated = review.get("escalation") or {}
    return {
        "id": review["id"],
        "revision": review["revision"],
        "version": review["version"],
        "pickable": review["state"] in PENDING,
        "summary": summary(review),
        "agent": read.who.name(review.get("agent_id") or ""),
        "category": _category_of(read.names, review),
        "kind": review["kind"],
        "recipients": recipients(review),
        "created_at": review["created_at"],
        "deadline": escalated.get("deadline", ""),
        "overdue": bool(escalated.get("overdue")),
        "state": review["state"],
        "held": review["id"] in read.held,
        "escalated": escalation.target(review),
        "first_contact": review["id"] in read.listing.first_contact,
        "warnings": len(warnings(review)),
        "open_by": ", ".join(read.open_by.get(review["id"], [])),
    }


def _auto_notified_row(names: Mapping[str, str], review: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": review["id"],
        "summary": summary(review),
        "category": _category_of(names, review),
        "recipients": recipients(review),
        "created_at": review["created_at"],
        "state": review["state"],
    }


def _splits(counts: Mapping[str, int], split: str, state: str, category: str) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "label": label,
            "count": counts.get(name, 0),
            "query": urlencode({"split": name, "category": category}),
            "current": name == split and state not in STATES,
        }
        for name, label in SPLITS.items()
    ]


def _nothing_listed(state: str, category: str) -> str:
    """What an empty queue says: the filters it was asked for, not always "waiting for review"."""
    where = f" in {category}" if category else ""
    return f"No drafts in state {state}{where}." if state else f"No drafts are waiting for review{where}."


@router.get("/queue")
async def queue(request: Request) -> Response:
    session = await web.reader(request)
    state = request.query_params.get("state", "")
    category = request.query_params.get("category", "")
    split = request.query_params.get("split", "")
    split = split if split in SPLITS and state not in STATES else ""
    read = await _read(request, session, [state] if state in STATES else list(PENDING), category, split)
    reviews = _shown(read, split)
    names = read.names
    since = max(
        (r["updated_at"] for r in read.listing.reviews),
        default=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    )
    body = render(
        "queue.html",
        session=session,
        splits=_splits(_counts(read), split, state, category),
        states=["", *STATES],
        state=state,
        categories=[(c, names.get(c, c)) for c in ["", *sorted(names, key=names.__getitem__)]],
        category=category,
        rows=[_row(read, review) for review in reviews],
        empty=_nothing_listed(state if state in STATES else "", names.get(category, category)),
        live="/console/events?" + urlencode({"since": since, "state": state, "category": category}),
        batch=any(r["state"] in PENDING for r in reviews),
        auto_notified=[_auto_notified_row(names, r) for r in read.auto_notified],
        auto_notified_shown=AUTO_NOTIFIED_SHOWN,
    )
    return page(
        "Review queue",
        body,
        session=session,
        active="queue",
        announce=await queue_view.announcement(request, session),
        toast=await undo_toast(request, session),
    )


# --- the live events ------------------------------------------------------------------------------


@router.get("/events")
async def events(request: Request) -> Response:
    """Server-sent events: every change to a draft of this project after ``Last-Event-ID`` (or ``since``),
    with the id of each event the ``updated_at`` it carries, so a reconnect resumes where it stopped."""
    session = await web.reader(request)
    since = request.headers.get("last-event-id") or request.query_params.get("since", "")
    state = request.query_params.get("state", "")
    category = request.query_params.get("category", "")
    return StreamingResponse(
        _stream(request, session, since, state, category),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _parse(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(UTC)


async def _notified(
    request: Request, session: Session, category: str, changed: list[dict[str, Any]]
) -> set[str]:
    """Which of the changed reviews went out without review in an auto_notify category (asked only
    when one of them left the pending states)."""
    if all(r["state"] in PENDING for r in changed):
        return set()
    asked = query([], category, humans_notified=True, limit=AUTO_NOTIFIED_SHOWN)
    return {r["id"] for r in await queue_view.listed(request, session, asked)}


def _review_event(
    review: dict[str, Any], listed: set[str], category: str, told: set[str], names: Mapping[str, str]
) -> bytes:
    data = {
        "id": review["id"],
        "state": review["state"],
        "pending": review["state"] in PENDING,
        "listed": review["state"] in listed and (not category or review.get("category_id") == category),
        "summary": summary(review),
    }
    if review["id"] in told:  # a line for "Sent without review"
        data["humans_notified"] = {"category": _category_of(names, review), "recipients": recipients(review)}
    return f"id: {review['updated_at']}\nevent: review\ndata: {json.dumps(data)}\n\n".encode()


async def _stream(
    request: Request, session: Session, since: str, state: str, category: str
) -> AsyncIterator[bytes]:
    listed = {state} if state in STATES else set(PENDING)
    mark = _parse(since)
    shown: dict[str, list[str]] | None = None
    names: dict[str, str] | None = None
    yield b"retry: 2000\n\n"
    while not await request.is_disconnected():
        try:  # a read that fails skips this tick; the stream stays open and the next tick catches up
            recent = await queue_view.listed(request, session, query([]))
            changed = sorted(
                (r for r in recent if _parse(r["updated_at"]) > mark), key=lambda r: r["updated_at"]
            )
            told = await _notified(request, session, category, changed)
            if told and names is None:
                names = await queue_view.category_names(request, session)
        except Exception:
            changed, told = [], set()
        for review in changed:
            mark = _parse(review["updated_at"])
            yield _review_event(review, listed, category, told, names or {})
        try:
            open_by = await presence.by_review(request, session)
        except Exception:
            open_by = shown or {}
        if open_by != shown:  # who has which draft open, whenever it changes
            shown = open_by
            yield f"event: presence\ndata: {json.dumps(open_by)}\n\n".encode()
        yield b": tick\n\n"
        await asyncio.sleep(LIVE_POLL_S)
