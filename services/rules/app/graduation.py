"""Graduation (spec 000, D16; ``domain.graduation``): agents propose the next rung, only a human
flips it, and only through the maturity gate. Every rung move tells review_state
(``category_changed``), which rechecks the pending drafts of the category.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.rules.v1.events_pb2 import CategoryChanged
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.app.authority import require
from rules.app.categories import CategoryView, broadcast_category_moved, get_category, load_category
from rules.app.dial import dial_for
from rules.app.env import REVIEW_STATE, Env, idempotent
from rules.domain import graduation
from rules.domain.graduation import Rung as Grad
from rules.store import CategoryRow

PROPOSED, APPROVED, REJECTED = "proposed", "approved", "rejected"
MAX_NOTE = 2000
MAX_EVIDENCE_BYTES = 16_384


def _evidence(evidence_json: str) -> dict[str, Any] | None:
    """The SDK's opaque ``evidence`` (a JSON object, as text), checked: None when there is none."""
    if not evidence_json:
        return None
    if len(evidence_json.encode()) > MAX_EVIDENCE_BYTES:
        raise invalid("/evidence", f"must be at most {MAX_EVIDENCE_BYTES} bytes as JSON")
    try:
        evidence = orjson.loads(evidence_json)
    except orjson.JSONDecodeError:
        evidence = None
    if not isinstance(evidence, dict):
        raise invalid("/evidence", "must be a JSON object")
    return evidence


@dataclass(frozen=True)
class Proposal:
    id: str
    category_id: str
    from_state: str
    to_state: str
    proposed_by: str
    note: str
    status: graduation.Status
    created_at: datetime
    decision: str = PROPOSED  # approved | rejected once a human decided
    reason: str = ""  # a rejection's, verbatim
    decided_by: str = ""
    decided_at: datetime | None = None
    evidence: dict[str, Any] | None = None  # the agent's, opaque


def _proposal(row: dict[str, Any], status: graduation.Status) -> Proposal:
    return Proposal(
        row["id"],
        row["category_id"],
        row["from_state"],
        row["to_state"],
        row["proposed_by"],
        row["note"],
        status,
        row["created_at"],
        row["status"],
        row["reason"] or "",
        row["decided_by"] or "",
        row["decided_at"],
        row["evidence"],
    )


def maturity(row: CategoryRow, now: datetime) -> graduation.Maturity:
    """The category's rung and its counters since it entered it, as of ``now``."""
    return graduation.Maturity(
        state=row.state,
        never_graduate=row.never_graduate,
        clean_approval_count=row.clean_approval_count,
        drift_count=row.drift_count,
        age_hours=max(0.0, (now - row.state_changed_at).total_seconds() / 3600),
    )


async def _status(
    conn: AsyncConnection, project_id: str, row: CategoryRow, now: datetime
) -> graduation.Status:
    dial = await dial_for(conn, project_id, row.id)
    return graduation.status(row.id, maturity(row, now), dial)


def emit_category_changed(uow: UnitOfWork, row: CategoryRow, state: Grad, reason: str) -> None:
    """A rung moved. An org-shared category's rung holds for every project of the org, so its event
    names no project (review_state then rechecks the whole org's pending drafts). Every agent hears of
    it too, as a broadcast: its routing into the category may change."""
    project_id = "" if row.scope == "org_shared" else row.project_id
    uow.emit(
        REVIEW_STATE,
        row.id,
        "category_changed",
        CategoryChanged(
            org_id=row.org_id, project_id=project_id, category_id=row.id, state=state.value, reason=reason
        ),
    )
    broadcast_category_moved(uow, row, reason, state=state.value)


async def graduation_status(env: Env, principal: Principal, category_id: str) -> graduation.Status:
    async with env.db.engine.connect() as conn:
        row = await load_category(conn, principal, category_id)
        return await _status(conn, principal.project_id, row, utcnow())


def _parse_rung(value: str, pointer: str) -> Grad:
    try:
        return Grad(value)
    except ValueError:
        raise invalid(pointer, f"must be one of {', '.join(r.value for r in graduation.LADDER)}") from None


async def propose_graduation(
    env: Env,
    principal: Principal,
    category_id: str,
    to_state: str,
    note: str,
    evidence_json: str = "",
    idempotency_key: str = "",
) -> Proposal:
    """Agents propose; only a human flips the rung (D16). The proposal, with the agent's ``note`` and
    ``evidence``, is recorded for the console, once per Idempotency-Key (a retry answers it again)."""
    if len(note) > MAX_NOTE:
        raise invalid("/note", f"must be at most {MAX_NOTE} characters")
    evidence = _evidence(evidence_json)

    async def act(uow: UnitOfWork) -> str:
        row = await load_category(uow.conn, principal, category_id)
        upcoming = graduation.next_rung(row.state)
        target = _parse_rung(to_state, "/to_state") if to_state else upcoming
        if row.never_graduate:
            raise DomainError(
                Code.GRADUATION_LOCKED,
                f"Category {category_id} is marked never_graduate; it stays supervised.",
            )
        if target is None or target != upcoming:
            raise invalid(
                "/to_state",
                f"the category is {row.state}; propose its next rung"
                + (f" ({upcoming})" if upcoming else " (it is already at the top)"),
            )
        proposal_id = new_id("gprop")
        await store.add_proposal(
            uow.conn,
            id=proposal_id,
            category_id=category_id,
            org_id=principal.org_id,
            project_id=principal.project_id,
            proposed_by=principal.actor_id,
            from_state=row.state.value,
            to_state=target.value,
            note=note,
            created_at=utcnow(),
            evidence=evidence,
        )
        return proposal_id

    fields = {"verb": "propose_graduation", "category_id": category_id, "to_state": to_state, "note": note}
    proposal_id = await idempotent(
        env, principal, idempotency_key, {**fields, "evidence": evidence_json}, act
    )
    async with env.db.engine.connect() as conn:
        category = await load_category(conn, principal, category_id)
        row = await store.get_proposal(conn, proposal_id)
        assert row is not None  # written above, or by the first call with this key
        return _proposal(row, await _status(conn, principal.project_id, category, utcnow()))


async def list_graduation_proposals(env: Env, principal: Principal, category_id: str = "") -> list[Proposal]:
    """Without ``category_id``, the console's queue (admin): proposals a human has not acted on yet.
    With it, that category's proposals, decided ones included, for any key that sees the category: how
    an agent learns its proposal was approved or rejected, and why. Newest first, each with its
    category's graduation status as of now."""
    if not category_id:
        require(principal, (ActorKind.ADMIN,), "Listing graduation proposals")
    now = utcnow()
    found: list[Proposal] = []
    async with env.db.engine.connect() as conn:
        statuses: dict[str, graduation.Status] = {}
        if category_id:
            statuses[category_id] = await _status(
                conn, principal.project_id, await load_category(conn, principal, category_id), now
            )
            rows = await store.category_proposals(conn, principal.project_id, category_id)
        else:
            rows = await store.pending_proposals(conn, principal.project_id)
        for row in rows:
            if row["category_id"] not in statuses:
                category = await load_category(conn, principal, row["category_id"])
                statuses[row["category_id"]] = await _status(conn, principal.project_id, category, now)
            found.append(_proposal(row, statuses[row["category_id"]]))
    return found


async def reject_graduation_proposal(
    env: Env, principal: Principal, proposal_id: str, reason: str
) -> Proposal:
    """A human closes a waiting proposal with a reason the agent reads verbatim; the category stays on
    its rung. Errors: ``not_found`` (another project's), ``bad_request`` (no reason),
    ``wrong_state`` (already decided, or moot: the category left the rung it proposed to leave)."""
    require(principal, (ActorKind.ADMIN,), "Rejecting a graduation proposal")
    reason = reason.strip()
    if not reason:
        raise invalid("/reason", "say why: the agent reads it")
    if len(reason) > MAX_NOTE:
        raise invalid("/reason", f"must be at most {MAX_NOTE} characters")
    now = utcnow()
    async with env.db.transaction() as uow:
        row = await store.get_proposal(uow.conn, proposal_id)
        if row is None or row["project_id"] != principal.project_id:
            raise DomainError(Code.NOT_FOUND, f"No graduation proposal {proposal_id} in this project.")
        category = await load_category(uow.conn, principal, row["category_id"])
        if row["status"] != PROPOSED or category.state.value != row["from_state"]:
            decided = (
                row["status"] if row["status"] != PROPOSED else f"moot (the category is {category.state})"
            )
            raise DomainError(Code.WRONG_STATE, f"Graduation proposal {proposal_id} is {decided}.")
        if not await store.decide_proposals(
            uow.conn, [proposal_id], REJECTED, principal.actor_id, now, reason
        ):
            raise DomainError(Code.STALE, "The proposal was decided at the same moment; re-read it.")
        status = await _status(uow.conn, principal.project_id, category, now)
        row |= {"status": REJECTED, "reason": reason, "decided_by": principal.actor_id, "decided_at": now}
    return _proposal(row, status)


async def graduate(env: Env, principal: Principal, category_id: str, to_state: str) -> CategoryView:
    """A human flips the rung: one rung up (never past ``never_graduate``, only through the maturity
    gate) or any rung down. Counters restart in the new rung."""
    require(principal, (ActorKind.ADMIN,), "Graduating a category")
    target = _parse_rung(to_state, "/to_state")
    async with env.db.transaction() as uow:
        row = await load_category(uow.conn, principal, category_id)
        if target is not row.state:
            up = graduation.LADDER.index(target) > graduation.LADDER.index(row.state)
            climbed: list[str] = []  # the waiting proposals of this very climb: it approves them
            if up:
                await _check_climb(uow.conn, principal, row, target)
                waiting = await store.pending_proposals(uow.conn, principal.project_id)
                climbed = [
                    p["id"] for p in waiting if p["category_id"] == row.id and p["to_state"] == target.value
                ]
            if not await store.compare_and_set_category(
                uow.conn,
                row,
                state=target,
                clean_approval_count=0,
                drift_count=0,
                state_changed_at=utcnow(),
            ):
                raise DomainError(
                    Code.STALE, "The category changed at the same moment; re-read it and retry."
                )
            emit_category_changed(uow, row, target, "graduated" if up else "demoted")
            if climbed:
                await store.decide_proposals(uow.conn, climbed, APPROVED, principal.actor_id, utcnow())
    return await get_category(env, principal, category_id)


async def _check_climb(conn: AsyncConnection, principal: Principal, row: CategoryRow, target: Grad) -> None:
    """A climb goes one rung at a time, never for a locked category, and only once the maturity gate
    of the rung it leaves is met (what ``can_graduate`` reports)."""
    if row.never_graduate:
        raise DomainError(
            Code.GRADUATION_LOCKED,
            f"Category {row.id} is marked never_graduate; clear the lock first.",
            state=row.state.value,
        )
    upcoming = graduation.next_rung(row.state)
    if target is not upcoming:
        raise invalid("/to_state", f"graduate one rung at a time; the next rung is {upcoming}")
    status = await _status(conn, principal.project_id, row, utcnow())
    if not status.maturity_gate_met:
        raise DomainError(
            Code.MATURITY_GATE_UNMET,
            f"{target} needs {status.graduate_min_approvals} clean approvals (has "
            f"{status.clean_approval_count}) and {status.graduate_min_age_hours} hours in "
            f"{row.state} (has {status.age_hours}).",
            state=row.state.value,
        )
