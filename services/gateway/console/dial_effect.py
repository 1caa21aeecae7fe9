"""The risk dial's what-if (issue 38): before an admin changes a category's dial, what the proposed values
would have done to its last drafts against the values in force, and the category's graduation record.
The page runs the REST route's own command (``routes.rules.get_dial_effect``): an agent and the console
ask the same question of the same use case."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from reviewloop.errors import Code, DomainError, http_status
from starlette.responses import Response

from gateway.console import web
from gateway.console.html import page, render
from gateway.console.sessions import Session
from gateway.routes.rules import get_dial_effect

router = APIRouter()

HOLDS = {
    "low_confidence": "confidence below the minimum",
    "first_contact": "first contact with a recipient",
    "canary": "canary sample for a human",
    "daily_cap": "daily auto-send cap spent",
}
_LABELS = {
    "min_confidence": (
        "Minimum confidence (0 to 1)",
        "A draft whose agent is less sure than this goes to a human.",
    ),
    "first_contact_gate": (
        "Hold first contacts",
        "A draft to someone the project never wrote to goes to a human.",
    ),
    "canary_rate": ("Canary rate (0 to 1)", "This share of the drafts that pass goes to a human anyway."),
    "auto_send_cap_per_day": (
        "Auto-sends per day",
        "After this many auto-sends in a day, the rest go to a human.",
    ),
}


def record_line(effect: dict[str, Any]) -> str:
    """The graduation record as the categories page shows it."""
    if not effect["decided"]:
        return f"no human decision among its last {effect['considered']} drafts"
    return (
        f"clean-approval streak {effect['clean_streak']}; edit rate {effect['edit_rate']:.0%} "
        f"of {effect['decided']} decisions"
    )


async def dial_effect(
    request: Request, session: Session, category_id: str, **proposed: Any
) -> dict[str, Any]:
    """The route's command, run for the console's session."""
    effect: dict[str, Any] = await get_dial_effect(
        category_id, session.principal, web.backend(request), **proposed
    )
    return effect


def _proposed(request: Request) -> dict[str, Any]:
    """The proposed values the form named (blank: the value in force), or ``bad_request``."""
    out: dict[str, Any] = {}
    for name, kind in (
        ("min_confidence", float),
        ("canary_rate", float),
        ("auto_send_cap_per_day", int),
        ("last", int),
    ):
        text = request.query_params.get(name, "").strip()
        if text:
            try:
                out[name] = kind(text)
            except ValueError:
                raise DomainError(
                    Code.BAD_REQUEST,
                    f"{_LABELS.get(name, ('How many drafts',))[0]}: {text!r} is not a number.",
                ) from None
    gate = request.query_params.get("first_contact_gate", "")
    if gate in ("true", "false"):
        out["first_contact_gate"] = gate == "true"
    return out


def _outcome(effect: dict[str, Any], side: str) -> dict[str, Any]:
    outcome = effect[side]
    return {
        "dial": "Proposed dial" if side == "proposed" else "Dial in force",
        "auto_sent": outcome["auto_sent"],
        "held": sum(outcome["held"].values()),
        "why": "; ".join(f"{n} {HOLDS.get(k, k)}" for k, n in outcome["held"].items()),
    }


@router.get("/categories/{category_id}/dial-effect")
async def dial_effect_page(request: Request, category_id: str) -> Response:
    session = await web.reader(request)
    web.require_admin(session)
    error = None
    try:
        effect = await dial_effect(request, session, category_id, **_proposed(request))
        shown = effect["proposed"]["dial"]
    except web.REFUSALS as exc:
        # A value out of range: the figures of the dial in force, with what the admin typed kept.
        error = web.as_domain(exc)
        if error.code is not Code.BAD_REQUEST:
            raise
        effect = await dial_effect(request, session, category_id)
        shown = {
            **effect["current"]["dial"],
            **{k: v for k, v in request.query_params.items() if k in _LABELS},
        }
    body = render(
        "dial_effect.html",
        refused=error.detail if error is not None else "",
        category_id=category_id,
        inputs=[
            {"name": name, "label": label, "why": why, "value": shown[name]}
            for name, (label, why) in _LABELS.items()
        ],
        last=request.query_params.get("last", "") or "200",
        considered=effect["considered"],
        outcomes=[_outcome(effect, "current"), _outcome(effect, "proposed")],
        record=record_line(effect),
    )
    return page(
        "Risk dial: what if",
        body,
        session=session,
        active="categories",
        status=200 if error is None else http_status(error.code),
    )
