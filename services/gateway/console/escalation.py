"""Escalation in the console (issue 38): the escalate form's picker of the project's people and roles and
its deadline, the queue's "Escalated to me" split (first in the queue, counted), and how a draft shows
whom it was escalated to and by when. The decision itself is the REST route's command
(``gateway.commands.reviews.decide``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from reviewloop.errors import invalid
from reviewloop.review.v1 import review_pb2
from starlette.datastructures import FormData

from gateway import escalation
from gateway.console import queue_view, web
from gateway.console.sessions import Session

SPLIT, LABEL = "mine", "Escalated to me"


async def escalated_to_me(
    request: Request, session: Session, states: tuple[str, ...], category_id: str
) -> review_pb2.ListReviewsResponse:
    """The pending drafts escalated to the signed-in key or its role: their ids and count."""
    asked = queue_view.query(states, category_id, escalated_to="me")
    return await queue_view.list_reviews(request, session, asked)


def mine_first(reviews: list[dict[str, Any]], mine: set[str]) -> list[dict[str, Any]]:
    """The drafts escalated to me first, each part in its own order."""
    return sorted(reviews, key=lambda review: review["id"] not in mine)


def _target(found: dict[str, Any]) -> str:
    target = found.get("escalated_to")
    return str(target.get("name") or target["id"]) if target else ""


def target(review: dict[str, Any]) -> str | None:
    """Whom a draft was escalated to ("" when it names no one); None when it is not escalated."""
    found = review.get("escalation")
    return _target(found) if found else None


async def targets(request: Request, session: Session) -> list[tuple[str, list[tuple[str, str]]]]:
    """The escalate form's choices, (value, label) by group: the project's people, then its roles."""
    people = await escalation.people(request, session.principal.project_id)
    return [
        (
            "People",
            [
                (f"person:{k.key_id}", f"{k.name or k.key_id} ({k.actor_kind})")
                for k in people
                if k.key_id != session.key_id
            ],
        ),
        ("Roles", [(f"role:{role}", f"all {name}") for role, name in escalation.ROLES.items()]),
    ]


def _deadline(form: FormData) -> datetime | None:
    """The deadline the browser converted to UTC (``deadline_utc``), else the typed one read as UTC."""
    text = (web.field(form, "deadline_utc") or web.field(form, "deadline")).strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid("/escalation_deadline", "is not a date and time") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def chosen_target(form: FormData) -> dict[str, Any]:
    """An escalate form's target and deadline, as the decision's shape names them (the command fills the
    request as the REST route's does)."""
    kind, _, target_id = web.field(form, "escalate_to").partition(":")
    chosen = {"kind": kind, "id": target_id} if kind or target_id else None
    return {"escalate_to": chosen, "escalation_deadline": _deadline(form)}
