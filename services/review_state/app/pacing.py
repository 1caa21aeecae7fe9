"""Backlog reconciliation and pacing (spec 000; ``domain.pacing``).

A rule change marks the pending drafts it leaves stale (``mark_stale``, in the event's unit of work) and
nudges none of them itself. The drafts are nudged a window at a time (``refill``): the post-ingest
refill and the sweep open each category's window; every later slot opens in the unit of work of the
edge that frees one (``settle``: a redraft or restamp that reaches the rule, or a close). A stale
draft is held from release until then (``hold``). Each step is one unit of work, and the sweep refills
any window a crash or the minimum interval left short, on any replica, once (the window row's lock).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from google.protobuf import json_format
from google.protobuf.message import Message
from reviewloop.errors import DomainError
from reviewloop.rules.v1.events_pb2 import RuleChanged
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.telemetry import tracer
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state import store
from review_state.app import _events
from review_state.app._gates import born_stale
from review_state.app.env import Env
from review_state.domain.machine import PENDING, RULES_NUDGES, Reason
from review_state.domain.pacing import StaleDraft, Window
from review_state.domain.review import Edge, Review
from review_state.domain.undo import held_later
from review_state.store import pacing as paced

log = logging.getLogger(__name__)


async def mark_stale(uow: UnitOfWork, change: RuleChanged) -> None:
    """The pending drafts in the rule's scope composed under an older high-water become stale against
    it: held from release, and (unless the save said ``propagate_to_pending: false``) owed a nudge. So
    does a draft whose release still waits out its undo window, if it is undone (``_hold_on_undo``)."""
    general = change.scope != "category"
    high_water = change.rule_high_water
    scope = {
        "org_id": change.org_id,
        "project_id": change.project_id,
        "category_id": "" if general else change.category_id,
        "agent_id": change.agent_id,
    }
    reason = RULES_NUDGES["general_rule" if general else "category_rule"]
    propagate = change.propagate_to_pending if change.HasField("propagate_to_pending") else True
    rule = (
        json_format.MessageToDict(change.rule, preserving_proto_field_name=True)
        if change.HasField("rule")
        else {}
    )

    def stale(draft: Review) -> StaleDraft | None:
        if high_water and draft.rule_high_water >= high_water:
            return None
        return StaleDraft(
            review_id=draft.id,
            project_id=draft.project_id,
            category_id=draft.category_id,
            required_high_water=high_water,
            rule=rule,
            reason=reason.value,
            propagate=propagate,
            suggested_batch=change.suggested_batch,
        )

    await _hold_on_undo(uow, change.org_id, scope, stale)  # first: see its docstring
    # Unlocked: nothing is nudged here; a refill locks the drafts it nudges.
    drafts = await store.pending_in_scope(uow.conn, **scope, lock=False)
    await paced.mark_stale(uow.conn, change.org_id, [row for d in drafts if (row := stale(d))])


async def _hold_on_undo(
    uow: UnitOfWork, org_id: str, scope: dict[str, str], stale: Callable[[Review], StaleDraft | None]
) -> None:
    """A draft approved before the rule landed and undone after must come back held like every other
    pending draft of the rule's reach. Its release, still in its undo window, keeps the hold in what
    the undo writes back (``domain.undo.held_later``); a release that goes to delivery drops it with
    the rest of that snapshot, so it never reaches ``stale_drafts`` nor counts in a window.
    Why here and not at the undo (asking rules for the stack's high water): the undo would need a peer
    call on its path and would still miss a rule that lands between that call and its commit. Here the
    attempt rows are locked before the pending drafts are read: an undo that withdrew a release first
    has committed by then (this read sees its draft pending), and one that comes after waits for this
    unit and finds the hold in the snapshot it deletes. Cost: one query per rule change, none per undo."""
    holds: list[StaleDraft] = []
    for draft, kept in await paced.releases_in_window(uow.conn, **scope):
        row = stale(draft)
        if row is not None and kept and (later := held_later(kept, row)) is not None:
            await paced.keep_for_undo(uow.conn, draft.id, later)
            holds.append(row)
    await paced.open_windows(uow.conn, org_id, holds)  # where the undone draft will wait for its nudge


async def refill(uow: UnitOfWork, window: Window, now: datetime) -> int:
    """Nudge the category's next stale drafts into its free slots, if the interval allows; how many."""
    conn = uow.conn
    stale, in_flight = await paced.counts(conn, window.project_id, window.category_id)
    room = window.room(in_flight, now)
    if not room:
        return 0
    due = await paced.waiting(conn, window.project_id, window.category_id, room, lock=True)
    if not due:
        return 0
    for review, row in due:
        with tracer.start_as_current_span(
            "pacing.nudge",
            attributes={
                "reviewloop.review_id": review.id,
                "reason": row.reason,
                "category_id": review.category_id,
            },
        ):
            payload: Message
            if row.reason == Reason.PROPAGATE_GENERAL_RULE.value:
                batch = window.suggested_batch(row.suggested_batch)
                payload = _events.propagate_general_rule(review, row, stale - 1, batch)
            else:
                payload = _events.rule_changed(review, row)
            _events.publish(uow, review, Reason(row.reason), payload)
    await paced.mark_nudged(conn, [r.id for r, _ in due], now)
    await paced.save_window(conn, replace(window, last_nudged_at=now))
    return len(due)


async def settle(uow: UnitOfWork, edge: Edge) -> StaleDraft | None:
    """In the unit of work of ``edge``: a stale draft that left pending, or whose redraft or restamp
    reached its rule, is no longer stale; the row it had (None: it stays as it was), for ``free``."""
    before, after = edge.before, edge.after
    if before.state not in PENDING:
        return None
    if after.state in PENDING and after.rule_high_water <= before.rule_high_water:
        return None
    return await paced.release(uow.conn, after)


async def free(uow: UnitOfWork, row: StaleDraft | None) -> None:
    """The released stale ``row`` (None: nothing was stale) advances its category's cursor, and a slot
    it held is refilled."""
    if row is None:
        return
    window = await paced.get_window(uow.conn, row.project_id, row.category_id, lock=True)
    if window is None:
        return
    window = replace(
        window, cursor_review_id=row.review_id, cursor_advanced_count=window.cursor_advanced_count + 1
    )
    await paced.save_window(uow.conn, window)
    if row.nudged_at is not None:
        await refill(uow, window, utcnow())


async def hold(conn: AsyncConnection, review: Review, *, leaving: bool) -> StaleDraft | None:
    """A stale draft is never approved into delivery: ``409 born_stale`` until the agent redrafts or
    honestly restamps it against the rules that moved (``guard`` re-nudges the agent). An approval
    ``leaving`` pending releases the row in the same statement (the 409 rolls it back) and returns it,
    for ``free`` after the compare-and-set."""
    if leaving:
        row = await paced.take(conn, review.id)
        required = row.required_high_water if row else None
    else:
        row, required = None, await paced.required_high_water(conn, review.id)
    if required is not None and required > review.rule_high_water:
        raise born_stale(
            review.rule_high_water,
            required,
            "is held by the backlog reconciliation until its agent redrafts or restamps it",
        )
    return row


async def overridden(conn: AsyncConnection, review_id: str, *, leaving: bool) -> StaleDraft | None:
    """A human approves a held draft as it stands (``override_held``): no ``409 born_stale``; an
    approval ``leaving`` pending still takes its stale row (returned for ``free``)."""
    return await paced.take(conn, review_id) if leaving else None


async def sweep(env: Env) -> int:
    """Refill every window with stale drafts still owed a nudge, with the project's pacing values read
    fresh from the rules context (a project whose values cannot be read keeps the last ones). Returns how
    many drafts it nudged."""
    async with env.db.engine.connect() as conn:
        scopes = await paced.windows_waiting(conn)
    values: dict[str, dict[str, int] | None] = {}
    nudged = 0
    for project_id, category_id in scopes:
        async with env.db.engine.connect() as conn:
            window = await paced.get_window(conn, project_id, category_id)
        if window is None:
            continue
        if project_id not in values:
            values[project_id] = await _settings(env, window)
        async with env.db.transaction() as uow:
            locked = await paced.get_window(uow.conn, project_id, category_id, lock=True, skip_locked=True)
            if locked is None:
                continue  # another replica is refilling it
            if values[project_id]:
                locked = replace(locked, **values[project_id])  # type: ignore[arg-type]
                await paced.save_window(uow.conn, locked)
            nudged += await refill(uow, locked, utcnow())
    return nudged


async def _settings(env: Env, window: Window) -> dict[str, int] | None:
    principal = Principal(window.org_id, window.project_id, ActorKind.SYSTEM, "pacing")
    try:
        return await env.peers.pacing_settings(principal)
    except DomainError as error:
        log.warning("pacing values of %s not read (kept the last ones): %s", window.project_id, error)
        return None


@dataclass(frozen=True)
class PacingState:
    """``get_pacing_state``: a category's pending drafts with their staleness, its window, and the SDK's
    review cursor (the draft a human last decided, and how many human decisions moved it)."""

    category_id: str
    drafts: list[tuple[Review, StaleDraft | None]]
    window: Window | None
    next_review_ids: list[str]
    cursor_review_id: str = ""
    cursor_advanced_count: int = 0

    @property
    def rule_high_water(self) -> int:
        return max((s.required_high_water for _, s in self.drafts if s is not None), default=0)


async def pacing_state(env: Env, principal: Principal, category_id: str) -> PacingState:
    async with env.db.engine.connect() as conn:
        drafts = await paced.pending_with_staleness(conn, principal.project_id, category_id)
        window = await paced.get_window(conn, principal.project_id, category_id)
        cursor, advanced = await paced.human_cursor(conn, principal.project_id, category_id)
    lookahead = window.lookahead_window if window is not None else Window("", "", "").lookahead_window
    upcoming = [r.id for r, s in drafts if s is not None and s.propagate and s.nudged_at is None]
    return PacingState(category_id, drafts, window, upcoming[:lookahead], cursor, advanced)
