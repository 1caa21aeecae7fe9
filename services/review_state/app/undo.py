"""The undo window (issue 38): a reviewer's approve or edit waits ``Settings.undo_window_s`` before it
goes to delivery, and its decider may take it back until then (``undo_decision``).

Why a time on the attempt and not a timer: the release is recorded with the decision, durable, and
simply not due before ``release_at`` (``domain.undo``), so the worker's claim and the sweep honour it as
they honour a retry's backoff. A restart inside the window loses nothing (the next sweep after it
delivers, once: the claim is a compare-and-set), and any replica may serve the undo. This process's
timer (``release_later``) only spares the release a wait for the next sweep.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime

from reviewloop.errors import Code, DomainError
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal

from review_state import store
from review_state.app import _kernel
from review_state.app._events import NOT_SENT, POOLED_PATHS, publish_pool_settled, withdraw_rule
from review_state.app.delivery import start_worker
from review_state.app.env import Env
from review_state.domain.feedback import UNDO, in_force
from review_state.domain.review import Edge, Review, Turn
from review_state.domain.undo import (
    already_released,
    check_undoable,
    check_undoer,
    facts,
    held_again,
    released_hold,
    restored,
    snapshot,
    undo_note,
)
from review_state.store import pacing as paced


def hold_release(uow: UnitOfWork, edge: Edge, send: dict[str, str], now: datetime, release: datetime) -> None:
    """Record, in the decision's unit of work, the attempt of a release that waits out its undo window:
    claimed by nobody, due at ``release``, keeping what the decision (``edge``) found and the rule hold
    it took, for an undo."""
    store.start_attempt(uow, edge.after, send, now, None, release, snapshot(edge.before, edge.released))


def release_later(env: Env, review_id: str, release: datetime) -> None:
    """This process's timer for a release in its window: at ``release`` it starts the worker that claims
    it (a claim that finds it undone, or taken by another replica, does nothing)."""

    async def wake() -> None:
        # A little past the window: the claim's "due" is ``release <= now`` on this clock.
        await asyncio.sleep(max((release - utcnow()).total_seconds(), 0.0) + 0.05)
        if env.releases.get(review_id) is task:
            del env.releases[review_id]
        start_worker(env, review_id)  # a task of its own, never cancelled with this timer

    _cancel_timer(env, review_id)
    task = asyncio.get_running_loop().create_task(wake())
    env.releases[review_id] = task


def _cancel_timer(env: Env, review_id: str) -> None:
    if (timer := env.releases.pop(review_id, None)) is not None:
        timer.cancel()


async def undo_decision(
    env: Env, principal: Principal, review_id: str, revision: int, version: int, idempotency_key: str = ""
) -> Review:
    """The decider takes back a release still in its undo window: the draft is exactly as the decision
    found it (state, revision, content), nothing is delivered or nudged, and an ``undo`` turn says who
    undid it. Refused ``wrong_state`` (reason ``already_released``) once the window closed."""
    if principal.actor_kind not in (ActorKind.HUMAN, ActorKind.ADMIN, ActorKind.REVIEW_AGENT):
        raise DomainError(Code.FORBIDDEN_SCOPE, "Only a reviewer undoes a decision.")
    fields = {"verb": "undo", "review_id": review_id, "revision": revision, "version": version}

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        now = utcnow()
        current = await _kernel.load(uow.conn, principal, review_id)
        actor = _kernel.actor_of(principal, current)
        check_undoable(current, actor)
        decider = _decider(await store.list_turns(uow.conn, review_id))
        check_undoer(
            current, actor, principal.actor_id, decider.actor_id if decider else None, (revision, version)
        )
        kept = await store.withdraw(uow.conn, review_id, now)
        if kept is None:
            raise already_released(current, actor)
        action = decider.action if decider is not None else "approve"
        saved = list(decider.rule_ids) if decider is not None else []  # the rule an edit-and-approve saved
        back = replace(current, updated_at=now, **restored(kept, actor))
        with _kernel.span(current, back.state, actor):
            turn = _kernel.turn(principal, UNDO, undo_note(action, saved), action=action)
            written = await store.compare_and_set(uow, current, back, turn=turn)
        if written is None:  # another writer between the read and the write: nothing is undone
            raise DomainError(
                Code.STALE, "The review changed at the same moment; re-read it.", **facts(current, actor)
            )
        if (held := held_again(kept, back)) is not None:  # the rule hold it took, or one that came since
            await paced.restore(uow.conn, held, released=released_hold(kept))
        for rule_id in saved:  # taken back by the rules context, unless changed since (through the outbox)
            withdraw_rule(uow, principal, current, rule_id)
        if current.send_path in POOLED_PATHS:  # a review agent's release spent a pool unit: it comes back
            publish_pool_settled(uow, current, NOT_SENT)
        return written[0], ""

    review = (await _kernel.once(env.db, principal, idempotency_key, fields, act))[0]
    _cancel_timer(env, review_id)
    return review


def _decider(turns: list[Turn]) -> Turn | None:
    """The decision that released the draft (who, with which action, the rule it saved): the last
    decision that stands."""
    decisions = [t for t in in_force(turns) if t.turn_type == "decision"]
    return decisions[-1] if decisions else None
