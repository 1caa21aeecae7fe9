"""Use cases of spec 001's review-run gate: count turns, claim a due review, ask the gate, log the
decision, and the session's `review on|off|now`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from reviewloop.storage import Database, utcnow
from reviewloop.tenancy import Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget import store
from dispatch_budget.app.authority import check_admin
from dispatch_budget.app.rounds import settle_timed_out
from dispatch_budget.classifier import ClassifierGate, GateOutcome
from dispatch_budget.domain.gate import (
    GATE_SETTINGS,
    GateConfig,
    GateRecord,
    SessionState,
    Turn,
    after_decision,
    after_review,
    after_turn,
    build_digest,
    check_gate_overrides,
    check_session_id,
    decided_without_the_gate,
    not_due_reason,
    overdue,
    page_after,
    timed_out,
)

tracer = trace.get_tracer(__name__)


@dataclass(frozen=True)
class TurnResult:
    counters: SessionState
    counted: bool
    decision: GateRecord | None
    not_due_reason: str | None


async def record_turn(
    db: Database,
    gate: ClassifierGate,
    principal: Principal,
    session_id: str,
    turn: Turn,
    digest: dict[str, Any],
) -> TurnResult:
    """Count one turn; when the counters are due, ask the gate and log the decision."""
    check_session_id(session_id)
    turn.check()
    project = principal.project_id
    async with db.transaction() as uow:
        config = gate.for_project(await store.gate_overrides.read(uow.conn, project))
        state = await _lock_live_session(uow.conn, config, project, session_id)
        if not turn.counts:
            await store.save_agent_session(uow.conn, project, session_id, state)
            return TurnResult(state, False, None, "not_counted")
        state = after_turn(state, turn)
        claimed, why_not = await _claim(uow.conn, config, project, session_id, state, review_now=False)
        if why_not is not None:
            return TurnResult(state, True, None, why_not)
    return await _decide(db, gate, config, project, session_id, claimed, digest, review_now=False)


async def decide_review(
    db: Database,
    gate: ClassifierGate,
    principal: Principal,
    *,
    session_id: str,
    review_now: bool,
    digest: dict[str, Any],
) -> TurnResult:
    """Ask for a review outside the turn flow: ``review now`` bypasses enabled, the counters and the
    cooldown; the session budget and the single in-flight rule still apply."""
    check_session_id(session_id)
    project = principal.project_id
    async with db.transaction() as uow:
        config = gate.for_project(await store.gate_overrides.read(uow.conn, project))
        state = await _lock_live_session(uow.conn, config, project, session_id)
        claimed, why_not = await _claim(uow.conn, config, project, session_id, state, review_now)
        if why_not is not None:
            return TurnResult(state, False, None, why_not)
    return await _decide(db, gate, config, project, session_id, claimed, digest, review_now)


async def _lock_live_session(
    conn: AsyncConnection, config: GateConfig, project: str, session_id: str
) -> SessionState:
    """The session's counters, locked, with a review in flight past ``timeoutMinutes`` ended as timed
    out: its admitted attempt (if any) settles no-verdict, so the session's next due review can run."""
    state = await store.lock_agent_session(conn, project, session_id)
    now = utcnow()
    if state.in_flight and state.in_flight_since is None:
        # In flight since before the start was kept: the timeout counts from now.
        return replace(state, in_flight_since=now)
    if timed_out(state, config, now):
        if state.in_flight_receipt:
            await settle_timed_out(conn, project, state.in_flight_receipt)
        state = after_review(state, succeeded=False)
    return state


async def end_overdue_reviews(db: Database, gate: ClassifierGate) -> int:
    """The timeout sweep every replica runs: a review in flight past its project's ``timeoutMinutes``
    ends as timed out, and its admitted attempt settles no-verdict ``timed_out``, without waiting for
    the session's next call. Each end is a compare-and-set on the review the sweep saw, so of two
    replicas (or a sweep and the session's own call) one ends it. Looking records nothing: a sweep that
    finds no overdue review leaves no span. Answers how many reviews this sweep ended.

    An attempt admitted without naming its session (``session_id``) is not settled here: nothing else
    ties a receipt to a spec 001 session (its run, attempt key and reviewer session are the reviewer's
    own names), and settling a guessed receipt would refund a round where spec 003 fails closed. It
    counts until its admission owner settles it."""
    now = utcnow()
    with suppress_instrumentation():
        async with db.engine.connect() as conn:
            found = await _overdue(conn, gate, now)
    if not found:
        return 0
    ended = 0
    with tracer.start_as_current_span("review.timeout_sweep") as span:
        for seen in found:
            async with db.transaction() as uow:
                if await store.end_in_flight(uow.conn, seen):
                    if seen.receipt:
                        await settle_timed_out(uow.conn, seen.project_id, seen.receipt)
                    ended += 1
        span.set_attributes({"reviewloop.overdue": len(found), "reviewloop.ended": ended})
    return ended


async def _overdue(conn: AsyncConnection, gate: ClassifierGate, now: datetime) -> list[store.InFlight]:
    configs: dict[str, GateConfig] = {}
    found = []
    for seen in await store.reviews_in_flight(conn):
        if seen.project_id not in configs:
            configs[seen.project_id] = gate.for_project(
                await store.gate_overrides.read(conn, seen.project_id)
            )
        if overdue(seen.since, configs[seen.project_id], now):
            found.append(seen)
    return found


async def _claim(
    conn: AsyncConnection,
    config: GateConfig,
    project: str,
    session_id: str,
    state: SessionState,
    review_now: bool,
) -> tuple[SessionState, str | None]:
    """Save the counters; when a review may run, mark it in flight before the gate is asked, so
    two callers never both start one."""
    now = utcnow()
    why_not = not_due_reason(state, config, now, review_now)
    if why_not is None:
        state = replace(state, in_flight=True, in_flight_since=now, in_flight_receipt=None)
    await store.save_agent_session(conn, project, session_id, state)
    return state, why_not


async def _decide(
    db: Database,
    gate: ClassifierGate,
    config: GateConfig,
    project: str,
    session_id: str,
    state: SessionState,
    digest: dict[str, Any],
    review_now: bool,
) -> TurnResult:
    # The classifier call runs between two transactions: no row lock is held across a network call.
    now = utcnow()
    active = gate.active_for(config)
    decided = decided_without_the_gate(state, config, active, now, review_now)
    if decided is not None:
        outcome = GateOutcome(decided, 0)
    else:
        called = active and not gate.breaker.open
        outcome = await gate.decide(
            build_digest(
                str(digest.get("last_human_message", "")),
                str(digest.get("last_assistant_message", "")),
                state.tools,
                [str(s) for s in digest.get("loaded_skills", [])],
                state.turn_index,
            ),
            config,
        )
        if called:
            state = replace(state, last_gate_call_at=now)
    record = GateRecord.of(
        outcome.decision,
        at=now,
        session=session_id,
        state=state,
        latency_ms=outcome.latency_ms,
        threshold=config.confident_no,
    )
    async with db.transaction() as uow:
        current = await store.lock_agent_session(uow.conn, project, session_id)
        current = after_decision(current, outcome.decision, now, state.last_gate_call_at)
        await store.save_agent_session(uow.conn, project, session_id, current)
        await store.log_gate_decision(uow.conn, project, record)
    return TurnResult(current, True, record, None)


async def set_review_enabled(
    db: Database, principal: Principal, session_id: str, enabled: bool
) -> SessionState:
    """``review on|off`` for a session: off stops automatic reviews immediately."""
    check_session_id(session_id)
    async with db.transaction() as uow:
        state = await store.lock_agent_session(uow.conn, principal.project_id, session_id)
        state = replace(state, enabled=enabled)
        await store.save_agent_session(uow.conn, principal.project_id, session_id, state)
        return state


async def finish_review(
    db: Database, principal: Principal, session_id: str, succeeded: bool, receipt_id: str = ""
) -> SessionState:
    """The review ended: it is no longer in flight; a successful one resets the counters. Naming its
    receipt, a late finish of a review that already ended (timed out) leaves the current one alone."""
    check_session_id(session_id)
    async with db.transaction() as uow:
        state = await store.lock_agent_session(uow.conn, principal.project_id, session_id)
        if receipt_id and receipt_id != state.in_flight_receipt:
            return state
        state = after_review(state, succeeded)
        await store.save_agent_session(uow.conn, principal.project_id, session_id, state)
        return state


async def list_gate_decisions(
    db: Database, principal: Principal, *, session_id: str = "", cursor: str = "", limit: int = 100
) -> tuple[list[GateRecord], str]:
    """The project's decision log, oldest first (the gates.jsonl records)."""
    after = page_after(cursor, limit)
    async with db.engine.connect() as conn:
        records, more = await store.gate_decision_page(
            conn, principal.project_id, session_id=session_id, after=after, limit=limit
        )
    return records, str(more) if more is not None else ""


async def set_gate_config(
    db: Database, gate: ClassifierGate, principal: Principal, overrides: dict[str, Any]
) -> tuple[dict[str, Any], GateConfig]:
    """An admin's gate configuration for the project (enabled, gate kind, thresholds, cooldowns, the
    classifier endpoint); what it leaves unset keeps the environment's default. Replaces the last one."""
    check_admin(principal, "Setting the review gate configuration")
    checked = check_gate_overrides(overrides, gate.config.endpoint_names)
    async with db.transaction() as uow:
        await store.gate_overrides.save(uow.conn, principal.project_id, checked, utcnow())
    return checked, gate.for_project(checked)


async def get_gate_config(
    db: Database, gate: ClassifierGate, principal: Principal
) -> tuple[dict[str, Any], GateConfig]:
    async with db.engine.connect() as conn:
        overrides = await store.gate_overrides.read(conn, principal.project_id)
    # A classifier_url stored before the endpoint became the deployment's is neither used nor shown.
    overrides = {k: v for k, v in overrides.items() if k in GATE_SETTINGS}
    return overrides, gate.for_project(overrides)
