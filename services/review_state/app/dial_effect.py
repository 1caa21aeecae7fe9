"""``GetDialEffect``: what a proposed change of a category's risk dial would have done to its last drafts,
against the dial in force, with the category's graduation record (``domain.dial_effect``). A read for
whoever sets the dial (a human or admin key): the console's page and an API client ask it here."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.tenancy import ActorKind, Principal

from review_state.app.env import Env
from review_state.domain import dial_effect
from review_state.domain.submission import Dial
from review_state.store.history import past_drafts

LAST_DEFAULT, LAST_MAX = 200, 1000
# The dial fields the auto-send gates read, and what each may be (rules' ``domain.risk`` ranges).
GATE_FIELDS = ("min_confidence", "first_contact_gate", "canary_rate", "auto_send_cap_per_day")


@dataclass(frozen=True)
class DialEffect:
    category_id: str
    current_dial: Dial
    proposed_dial: Dial
    current: dial_effect.Effect
    proposed: dial_effect.Effect
    record: dial_effect.Record


def _checked(proposed: dict[str, Any]) -> dict[str, Any]:
    for name, value in proposed.items():
        if name not in GATE_FIELDS:
            raise invalid(
                f"/{name}", f"is not a dial field the auto-send gates read; one of {', '.join(GATE_FIELDS)}"
            )
        if name in ("min_confidence", "canary_rate") and not 0 <= value <= 1:
            raise invalid(f"/{name}", "must be between 0 and 1")
        if name == "auto_send_cap_per_day" and value < 0:
            raise invalid(f"/{name}", "must be 0 or more")
    return proposed


async def get_dial_effect(
    env: Env, principal: Principal, category_id: str, proposed: dict[str, Any], last: int
) -> DialEffect:
    """The category's last ``last`` drafts (0: the default) replayed under its dial in force and under
    the dial with ``proposed`` values (the fields not named keep their value in force)."""
    if principal.actor_kind not in (ActorKind.HUMAN, ActorKind.ADMIN):
        # The dial is human authority: its what-if is for whoever sets it (agents read it, get_risk_dial).
        raise DomainError(Code.FORBIDDEN_SCOPE, "A dial's what-if takes a human or admin key.")
    if not category_id:
        raise invalid("/category_id", "name the category whose dial you would change")
    if not 0 <= last <= LAST_MAX:
        raise invalid("/last", f"must be between 1 and {LAST_MAX}")
    changes = _checked(proposed)
    await env.peers.get_category(principal, category_id)  # not_found for another tenant's or no category
    current = await env.peers.get_dial(principal, category_id)
    candidate = replace(current, **changes)
    async with env.db.single_statement.connect() as conn:
        drafts = await past_drafts(conn, principal.project_id, category_id, last or LAST_DEFAULT)
    return DialEffect(
        category_id=category_id,
        current_dial=current,
        proposed_dial=candidate,
        current=dial_effect.effect(drafts, current),
        proposed=dial_effect.effect(drafts, candidate),
        record=dial_effect.record([d.decision for d in reversed(drafts)]),
    )
