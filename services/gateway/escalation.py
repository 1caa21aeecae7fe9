"""An escalation's target as the project names it, for review_state's Decide: a person is a live human or
admin key of the project (its name, and its address when it has one), a role is the kind of key that
decides (every live key of it with an address is mailed). The REST route, MCP and the console all fill the
request here."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Request
from reviewloop.errors import invalid
from reviewloop.review.v1 import review_pb2
from reviewloop.tenancy import ActorKind, Principal

from gateway import store

# The roles an escalation may name (review_state's ``domain.escalation.ROLES``), as people read them.
ROLES = {ActorKind.HUMAN.value: "reviewers", ActorKind.ADMIN.value: "admins"}
DECIDERS = (ActorKind.HUMAN, ActorKind.ADMIN)


async def people(request: Request, project_id: str) -> list[store.ApiKey]:
    """The project's live keys that decide drafts: whom an escalation may name, oldest first."""
    async with request.app.state.db.single_statement.connect() as conn:
        keys = await store.project_keys(conn, project_id)
    return [k for k in reversed(keys) if k.revoked_at is None and k.actor_kind in DECIDERS]


async def fill(
    request: Request,
    principal: Principal,
    message: review_pb2.DecideRequest,
    *,
    kind: str,
    target_id: str,
    deadline: datetime | None,
) -> None:
    """Name the target (``kind`` "" names no one), the deadline, whom the mail goes to, the console's
    link and the decider's name on an escalate ``message``; ``bad_request`` for a target the project has
    not got."""
    keys = await people(request, principal.project_id)
    notify: list[str] = []
    if kind == "person":
        key = next((k for k in keys if k.key_id == target_id), None)
        if key is None:
            raise invalid("/escalate_to/id", "names no live human or admin key of this project")
        name, notify = key.name or key.key_id, [key.email] if key.email else []
    elif kind == "role":
        if target_id not in ROLES:
            raise invalid("/escalate_to/id", f"a role is one of {', '.join(ROLES)}")
        name = ROLES[target_id]
        notify = sorted({k.email for k in keys if k.actor_kind == target_id and k.email})
    elif kind or target_id:
        raise invalid("/escalate_to/kind", "must be person or role")
    if kind:
        message.escalate_to.CopyFrom(review_pb2.EscalationTarget(kind=kind, id=target_id, name=name))
    if deadline is not None:
        message.escalation_deadline.FromDatetime(
            deadline.replace(tzinfo=UTC) if deadline.tzinfo is None else deadline.astimezone(UTC)
        )
    message.notify_addresses.extend(notify)
    message.review_url = str(request.base_url).rstrip("/") + f"/console/reviews/{message.review_id}"
    me = next((k for k in keys if k.key_id == principal.actor_id), None)
    message.decider_name = me.name if me is not None and me.name else principal.actor_id
