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
from gateway.console.html import h, page, table
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


def _outcome(effect: dict[str, Any], side: str) -> str:
    outcome = effect[side]
    held = sum(outcome["held"].values())
    why = "; ".join(f"{n} {HOLDS.get(k, k)}" for k, n in outcome["held"].items())
    return (
        f"<tr><th scope='row'>{'Proposed dial' if side == 'proposed' else 'Dial in force'}</th>"
        f"<td>{outcome['auto_sent']}</td><td>{held}{f' ({h(why)})' if why else ''}</td></tr>"
    )


def _inputs(shown: dict[str, Any]) -> str:
    out = []
    for name, (label, why) in _LABELS.items():
        value = shown[name]
        if name == "first_contact_gate":
            options = "".join(
                f'<option value="{v}"{" selected" if (v == "true") == (value in (True, "true")) else ""}>{"yes" if v == "true" else "no"}</option>'
                for v in ("true", "false")
            )
            field = f'<select id="what-if-{name}" name="{name}" aria-describedby="what-if-{name}-why">{options}</select>'
        else:
            field = (
                f'<input type="text" inputmode="decimal" id="what-if-{name}" name="{name}" value="{h(value)}" '
                f'aria-describedby="what-if-{name}-why">'
            )
        out.append(
            f'<label for="what-if-{name}">{h(label)}</label>{field}<span class="hint" id="what-if-{name}-why">{h(why)}</span>'
        )
    return "".join(out)


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
    last = request.query_params.get("last", "") or "200"
    refusal = (
        f'<div class="error" role="alert" data-autofocus tabindex="-1"><p>Refused: {h(error.detail)}</p>'
        "<p>The figures below are for the dial in force; correct the value and show the effect again.</p></div>"
        if error is not None
        else ""
    )
    body = f"""{refusal}
<p class="lede">What a change of this category's risk dial would have done to its last drafts, had the
category been graduated: each draft replayed through the auto-send gates under the dial in force and under
the values below. Nothing is saved here; the dial is set on the <a href="/console/settings">Settings</a> page.</p>
<form method="get" action="/console/categories/{h(category_id)}/dial-effect" class="dial-what-if">
  {_inputs(shown)}
  <label for="what-if-last">How many of the last drafts</label>
  <input type="text" inputmode="numeric" id="what-if-last" name="last" value="{h(last)}">
  <p><button type="submit" id="what-if-show">Show the effect</button></p>
</form>
<section aria-labelledby="effect-h" id="dial-effect"><h2 id="effect-h">Of the last {effect["considered"]} drafts</h2>
{table("Auto-sent and held under each dial", ["Dial", "Would have been auto-sent", "Would have been held for a human"], [_outcome(effect, "current"), _outcome(effect, "proposed")], empty="No drafts in this category yet.")}
</section>
<section aria-labelledby="record-h" id="graduation-record"><h2 id="record-h">Graduation record</h2>
<p>{h(record_line(effect))}.</p></section>"""
    return page(
        "Risk dial: what if",
        body,
        session=session,
        active="categories",
        status=200 if error is None else http_status(error.code),
    )
