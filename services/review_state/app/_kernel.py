"""What every use case runs on: who the caller is in the table, load, check, compare-and-set, the
Idempotency-Key, and the nudges a refused verb still owes the agent.

A mutation reads in this order: a replay of its Idempotency-Key and the table's verdict (``precheck``,
one statement before any peer is called, so a 409 costs no remote call), the peer calls, then one unit
of work (``once`` -> ``transition``: the edge's CAS and the nudge ``NUDGES`` gives it). A mutation that
calls no peer reads its key with the review in ``transition`` instead, unless its unit is then a single
statement (``move(last=True)``: an open, a decision), which runs in autocommit on PostgreSQL. ``guard``
wraps it all, so a refusal named in ``REFUSAL_NUDGES`` still leaves its nudge.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Generic, NoReturn, TypeVar

from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.storage import Database, UnitOfWork, idempotency, utcnow
from reviewloop.telemetry import tracer
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state import store
from review_state.app import _events, pacing
from review_state.domain.machine import (
    CLOSED,
    PENDING,
    REFUSAL_NUDGES,
    Actor,
    Reason,
    State,
    Verb,
    allowed_actions,
    check_transition,
    parked,
)
from review_state.domain.review import Edge, Move, Review, Turn

T = TypeVar("T")
G = TypeVar("G")  # what a mutation's peer calls found
# A mutation's unit of work: the review as it now is, and the id of what it created ("" for none).
Act = Callable[[UnitOfWork], Awaitable[tuple[Review, str]]]

_TURN_ACTOR = {
    ActorKind.AGENT: "agent",
    ActorKind.HUMAN: "human",
    ActorKind.ADMIN: "human",
    ActorKind.REVIEW_AGENT: "review_agent",
    ActorKind.SYSTEM: "system",
}


def not_found(review_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No review {review_id} is visible to this key.")


def actor_of(principal: Principal, review: Review) -> Actor:
    """Which column of the transition table the caller acts in."""
    if principal.actor_kind is ActorKind.AGENT:
        if principal.actor_id != review.agent_id:
            raise DomainError(
                Code.FORBIDDEN_SCOPE, "Only the agent that composed this review may change it as composer."
            )
        return Actor.COMPOSER
    if principal.actor_kind in (ActorKind.HUMAN, ActorKind.ADMIN):
        return Actor.HUMAN
    if principal.actor_kind is ActorKind.REVIEW_AGENT:
        return Actor.REVIEW_AGENT
    return Actor.SYSTEM


def require_admin(principal: Principal) -> None:
    if principal.actor_kind is not ActorKind.ADMIN:
        raise DomainError(Code.FORBIDDEN_SCOPE, "This is a console verb: it takes an admin key.")


def span(review: Review, target: State, actor: Actor) -> Any:
    """The domain span of one state change (DESIGN.md "Traces")."""
    return tracer.start_as_current_span(
        "review.transition",
        attributes={
            "reviewloop.review_id": review.id,
            "from_state": review.state.value,
            "to_state": target.value,
            "actor_kind": actor.value,
            **({"category_id": review.category_id} if review.category_id else {}),
        },
    )


async def load(conn: AsyncConnection, principal: Principal, review_id: str) -> Review:
    review = await store.get_review(conn, principal.project_id, review_id)
    if review is None:
        raise not_found(review_id)
    return review


# --- the Idempotency-Key ---------------------------------------------------------------------------


async def _replay(
    conn: AsyncConnection, principal: Principal, row: Row[Any] | store.Remembered
) -> tuple[Review, str]:
    return await load(conn, principal, row.review_id), row.result_id


async def replayed(
    conn: AsyncConnection, principal: Principal, key: str, fields: Mapping[str, Any]
) -> tuple[Review, str] | None:
    """The earlier result of this Idempotency-Key, checked before any peer is called, on a connection
    of ``Database.single_statement`` (PostgreSQL: no BEGIN ... ROLLBACK around it)."""
    if not key:
        return None
    row = await idempotency.seen(
        conn,
        store.idempotency_keys,
        principal.project_id,
        principal.actor_id,
        key,
        idempotency.request_hash(fields),
    )
    return None if row is None else await _replay(conn, principal, row)


async def replay_of(
    conn: AsyncConnection, principal: Principal, row: store.Remembered | None, fields: Mapping[str, Any]
) -> tuple[Review, str] | None:
    """``replayed`` for a key's row read with other rows (``sending_facts(key=...)``)."""
    if row is None or not idempotency.is_replay(row.request_hash, idempotency.request_hash(fields)):
        return None
    return await _replay(conn, principal, row)


async def once(
    db: Database,
    principal: Principal,
    key: str,
    fields: Mapping[str, Any],
    act: Act,
    *,
    checked: bool = False,
) -> tuple[Review, str, bool]:
    """Run ``act`` once per Idempotency-Key: a retry with the same body gets the review as it now is
    (and the first call's result id). Returns (review, result_id, replayed). ``checked``: the key is
    read elsewhere, so the unit of work does not read it first: before it (``replayed``, or ``precheck``
    with the key), or by ``act`` itself (``transition`` with the key)."""

    async def replay(conn: AsyncConnection, row: Row[Any]) -> tuple[Review, str]:
        return await _replay(conn, principal, row)

    (review, result_id), was_replayed = await idempotency.once(
        db,
        store.idempotency_keys,
        idempotency.Request(principal.project_id, principal.actor_id, key, fields),
        act,
        lambda result: {"review_id": result[0].id, "result_id": result[1]},
        replay,
        checked=checked,
    )
    return review, result_id, was_replayed


# --- transitions -----------------------------------------------------------------------------------


async def move(
    uow: UnitOfWork, review: Review, actor: Actor, step: Move, cas: store.Cas = store.PLAIN
) -> Edge:
    """Check ``step`` against the table, compare-and-set it, and queue the nudge the edge emits. Raises
    the spec's 409s. ``cas``: how the store writes it (``store.Cas``). Its ``not_stale`` says the
    caller read the draft as not held stale, so an approval's compare-and-set checks it still is not,
    instead of a statement of its own taking the draft's stale row (``pacing.hold``)."""
    verb = step.verb
    target = check_transition(
        review, verb, actor, parent_revision=step.parent_revision, expected_version=step.expected_version
    )
    if step.short_of_quorum:
        target = review.state
    approved = step.if_approved is not None and target is State.APPROVED
    after = (step.if_approved if approved else step.changed) or review
    if after.updated_at == review.updated_at:
        after = replace(after, updated_at=utcnow())
    # A stale draft is not released before its redraft; an approval that leaves pending takes its
    # stale row here, in the statement that checks it, instead of reading it again in ``settle``.
    leaving = verb is Verb.APPROVE and review.state in PENDING and target not in PENDING
    checks_stale = cas.not_stale and leaving and not step.override_held  # the CAS refuses a draft held since
    released = None
    if verb is Verb.APPROVE and step.override_held:
        released = await pacing.overridden(uow.conn, review.id, leaving=leaving)
    elif verb is Verb.APPROVE and not checks_stale:
        released = await pacing.hold(uow.conn, review, leaving=leaving)

    stale = partial(_lost, uow, review, actor, checks_stale=checks_stale)
    with span(review, target, actor):
        written = await store.compare_and_set(
            uow,
            review,
            replace(after, state=target),
            turn=step.turn,
            cas=replace(cas, not_stale=checks_stale),
            lost=stale,
        )
    if written is None:
        await stale()
    updated, written_turn = written
    edge = Edge(review, updated, verb, actor, written_turn)
    _events.publish_edge(uow, edge, step.facts)
    if not leaving:
        released = await pacing.settle(uow, edge)
    await pacing.free(uow, released)
    return replace(edge, released=released)


async def _lost(uow: UnitOfWork, review: Review, actor: Actor, *, checks_stale: bool) -> NoReturn:
    """``409 stale``: another writer committed between our read and our write; it reports the row as
    it now is. With no writer (``checks_stale``: the version did not move), the draft was held stale
    since: its 409 is ``born_stale``, if it holds it."""
    now = await store.get_review(uow.conn, review.project_id, review.id) or review
    if checks_stale and now.version == review.version:
        await pacing.hold(uow.conn, review, leaving=False)
    raise DomainError(
        Code.STALE,
        f"Another writer changed the review at the same moment (it is now revision {now.revision}, "
        f"version {now.version}); re-read it, re-apply your change on top, and retry.",
        state=now.state,
        revision=now.revision,
        version=now.version,
        allowed_actions=allowed_actions(now.state, actor),
    )


async def transition(
    uow: UnitOfWork,
    principal: Principal,
    review_id: str,
    step: Move,
    *,
    key: str = "",
    fields: Mapping[str, Any] | None = None,
) -> Edge:
    """Load the review and ``move`` it as the caller. With an Idempotency-Key (``once(...,
    checked=True)``), the load reads the key too: a retry of a request that ran raises
    ``idempotency.Replayed`` with the review as it now is and the first call's result id."""
    if key:
        review, result_id, _ = await _keyed(uow.conn, principal, review_id, key, fields or {})
        if result_id is not None:
            raise idempotency.Replayed((review, result_id))
    else:
        review = await load(uow.conn, principal, review_id)
    return await move(uow, review, actor_of(principal, review), step)


async def _keyed(
    conn: AsyncConnection, principal: Principal, review_id: str, key: str, fields: Mapping[str, Any]
) -> tuple[Review, str | None, bool]:
    """The review, read with the caller's Idempotency-Key ``key`` in one statement, the first call's
    result id when this request (``fields``) is a retry of one that ran (else None), and whether the
    draft is held stale."""
    found = await store.get_review_keyed(conn, principal.project_id, review_id, principal.actor_id, key)
    if found is None:
        raise not_found(review_id)
    review, stored_hash, result_id, stale = found
    if key and idempotency.is_replay(stored_hash, idempotency.request_hash(fields)):
        return review, result_id, stale
    return review, None, stale


async def precheck(
    db: Database,
    principal: Principal,
    review_id: str,
    verb: Verb,
    parent_revision: int,
    expected_version: int | None = None,
    *,
    key: str = "",
    fields: Mapping[str, Any] | None = None,
) -> tuple[Review, str | None, bool]:
    """The table's verdict before any peer is called, so a 409 costs no remote call, and the replay of
    the Idempotency-Key ``key`` (for the request ``fields``) read in the same statement: a retry of a
    request that ran gets the review as it now is, unchecked, and the first call's result id (None
    for a request that has not run). Last, whether the draft is held stale (``move(not_stale=...)``)."""
    async with db.single_statement.connect() as conn:  # PostgreSQL: no BEGIN ... ROLLBACK around it
        review, result_id, stale = await _keyed(conn, principal, review_id, key, fields or {})
    if result_id is not None:
        return review, result_id, stale
    check_transition(
        review,
        verb,
        actor_of(principal, review),
        parent_revision=parent_revision,
        expected_version=expected_version,
    )
    return review, None, stale


@dataclass(frozen=True)
class Request:
    """What a mutation of one review names: its verb on the (revision, version) its caller read, and
    its Idempotency-Key with the request the key is for."""

    verb: Verb
    review_id: str
    parent_revision: int
    expected_version: int | None
    key: str
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class Phases(Generic[G]):
    """A mutation's steps between its precheck and its unit of work: ``peers``, the remote calls, given
    the review as the precheck read it; ``step``, the domain's pure function that makes the move from the
    review as the unit reads it and what the peers found."""

    peers: Callable[[Review], Awaitable[G]]
    step: Callable[[Review, G], Move]


async def mutate(db: Database, principal: Principal, request: Request, phases: Phases[G]) -> Review:
    """A mutation of one review, its phases in order: ``precheck`` (the table's verdict and the key's
    replay, before any peer is called), ``phases.peers``, then one unit of work (``once``) that reads
    the review again and writes ``phases.step``'s move; ``guard`` leaves a refusal's nudge."""

    async def run() -> Review:
        current, replayed, _ = await precheck(
            db,
            principal,
            request.review_id,
            request.verb,
            request.parent_revision,
            request.expected_version,
            key=request.key,
            fields=request.fields,
        )
        if replayed is not None:
            return current
        found = await phases.peers(current)

        async def act(uow: UnitOfWork) -> tuple[Review, str]:
            before = await load(uow.conn, principal, request.review_id)
            edge = await move(uow, before, actor_of(principal, before), phases.step(before, found))
            return edge.after, ""

        return (await once(db, principal, request.key, request.fields, act, checked=True))[0]

    return await guard(db, principal, request.review_id, request.parent_revision, run)


def turn(principal: Principal, turn_type: str, body: str, *, turn_id: str = "", **extra: Any) -> Turn:
    """The thread's entry ``principal`` writes with a move (``move(turn=...)`` gives it its review, seq
    and revision)."""
    return Turn(
        id=turn_id or new_id("turn"),
        review_id="",
        seq=0,
        turn_type=turn_type,
        actor_kind=_TURN_ACTOR[principal.actor_kind],
        actor_id=principal.actor_id,
        body=body,
        revision=0,
        created_at=utcnow(),
        **extra,
    )


# --- what a refusal still owes the agent ----------------------------------------------------------


async def guard(
    db: Database,
    principal: Principal,
    review_id: str,
    parent_revision: int,
    run: Callable[[], Awaitable[T]],
) -> T:
    """Runs a mutation; a refusal ``REFUSAL_NUDGES`` names (a ``409 terminal``, a born-stale redraft)
    also leaves its nudge, in a transaction of its own since the mutation wrote nothing. A verb refused on
    an approved review is ``send_needs_reconciliation`` when its attempt is parked (one read, on the
    refusal only); merely in flight, it stays ``wrong_state``."""
    try:
        return await run()
    except DomainError as error:
        if error.code is Code.WRONG_STATE and error.state is State.APPROVED:
            async with db.single_statement.connect() as conn:
                attempt = await store.get_attempt(conn, review_id, principal.project_id)
            if attempt is not None and attempt.status == "in_flight" and attempt.stage == store.PARKED:
                raise parked(error) from None
            raise
        reason = REFUSAL_NUDGES.get(error.code)
        if reason is not None:
            await _ON_REFUSAL[reason](db, principal, review_id, parent_revision, error)
        raise


async def _front_run_next(
    db: Database, principal: Principal, review_id: str, parent_revision: int, error: DomainError
) -> None:
    """The durable answer to the composer's 409 terminal; the nudge service collapses repeats to one
    row. It is the composer's event: a human's or a review agent's 409 queues nothing, so the agent's
    queue never holds a revision it did not chase and the terminal nudge stays the review's last."""
    if principal.actor_kind is not ActorKind.AGENT:
        return
    async with db.transaction() as uow:
        review = await store.get_review(uow.conn, principal.project_id, review_id)
        if review is None or review.state not in CLOSED:
            return
        turns = await store.list_turns(uow.conn, review.id)
        diff_available = any(t.diff_json is not None for t in turns)
        payload = _events.front_run_next(review, parent_revision, diff_available)
        _events.publish(uow, review, REFUSAL_NUDGES[Code.TERMINAL], payload)


async def _born_stale(
    db: Database, principal: Principal, review_id: str, parent_revision: int, error: DomainError
) -> None:
    """A stale composition token: no mutation, a fresh ``rule_changed`` nudge, and the 409 with facts."""
    async with db.transaction() as uow:
        review = await load(uow.conn, principal, review_id)
        _events.publish(
            uow, review, REFUSAL_NUDGES[Code.BORN_STALE], _events.born_stale(review, error.detail)
        )
    error.state, error.revision, error.version = review.state, review.revision, review.version
    error.allowed_actions = allowed_actions(review.state, actor_of(principal, review))


_ON_REFUSAL: dict[Reason, Callable[[Database, Principal, str, int, DomainError], Awaitable[None]]] = {
    Reason.FRONT_RUN_NEXT: _front_run_next,
    Reason.RULE_CHANGED: _born_stale,
}
