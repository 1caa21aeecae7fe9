"""review_state use cases: one function per RPC, one transaction each."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.storage import Database, UnitOfWork, first_delivery, utcnow
from reviewloop.telemetry import tracer
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.exc import IntegrityError

from review_state import store
from review_state.domain.machine import CLOSED, Actor, State, Verb, check_transition
from review_state.domain.submission import Draft, require_intent, validate_draft
from review_state.store import Review

log = logging.getLogger(__name__)

NUDGE = "nudge"  # the outbox destination that turns these events into nudges
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200


def _not_found(review_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No review {review_id} is visible to this key.")


def _actor(principal: Principal, review: Review) -> Actor:
    """Which column of the transition table the caller acts in."""
    if principal.actor_kind is ActorKind.AGENT:
        if principal.actor_id != review.agent_id:
            raise DomainError(
                Code.FORBIDDEN_ACTOR, "Only the agent that composed this review may change it as composer."
            )
        return Actor.COMPOSER
    if principal.actor_kind in (ActorKind.HUMAN, ActorKind.ADMIN):
        return Actor.HUMAN
    if principal.actor_kind is ActorKind.REVIEW_AGENT:
        return Actor.REVIEW_AGENT
    return Actor.SYSTEM


def _emit_nudge(uow: UnitOfWork, review: Review, reason: str, payload: dict[str, Any]) -> None:
    uow.emit(
        NUDGE,
        review.id,
        NUDGE,
        {
            "reason": reason,
            "review_id": review.id,
            "org_id": review.org_id,
            "project_id": review.project_id,
            "agent_id": review.agent_id,
            "category_id": review.category_id,
            "payload": payload,
        },
    )


def _request_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def _idempotent(
    db: Database,
    principal: Principal,
    key: str,
    fields: dict[str, Any],
    act: Callable[[UnitOfWork], Awaitable[Review]],
) -> Review:
    """Run ``act`` once per Idempotency-Key: a retry with the same body gets the review as it now is;
    the same key with another body is ``idempotency_conflict``."""
    if not key:
        async with db.transaction() as uow:
            return await act(uow)
    request_hash = _request_hash(fields)
    for _ in range(2):  # a concurrent twin may win the key's insert; the second pass then reads it
        try:
            async with db.transaction() as uow:
                seen = await store.find_idempotent(uow.conn, principal.project_id, principal.actor_id, key)
                if seen is not None:
                    if seen.request_hash != request_hash:
                        raise DomainError(
                            Code.IDEMPOTENCY_CONFLICT,
                            "This Idempotency-Key was already used with a different request body; "
                            "use a new key for a new request.",
                        )
                    review = await store.get_review(uow.conn, principal.project_id, seen.review_id)
                    if review is None:
                        raise _not_found(seen.review_id)
                    return review
                review = await act(uow)
                await store.remember_idempotent(
                    uow.conn, principal.project_id, principal.actor_id, key, request_hash, review.id, utcnow()
                )
                return review
        except IntegrityError:
            continue
    raise DomainError(Code.CONFLICT, "A concurrent request with this Idempotency-Key is in flight; retry.")


async def submit(
    db: Database,
    principal: Principal,
    *,
    kind: str,
    draft: Draft,
    category_id: str,
    idempotency_key: str,
) -> Review:
    """Queue a send for review. Shape errors, then the intent gate, come before anything is stored."""
    if principal.actor_kind is not ActorKind.AGENT:
        raise DomainError(Code.FORBIDDEN_ACTOR, "Only an agent key composes outbound messages.")
    validate_draft(draft)
    require_intent(draft.intent)

    async def act(uow: UnitOfWork) -> Review:
        now = utcnow()
        review = Review(
            id=new_id("rr"),
            org_id=principal.org_id,
            project_id=principal.project_id,
            agent_id=principal.actor_id,
            category_id=category_id,
            kind=kind,
            state=State.NEEDS_REVIEW,
            revision=1,
            version=1,
            to=list(draft.to),
            cc=list(draft.cc),
            bcc=list(draft.bcc),
            subject=draft.subject,
            body_text=draft.body_text,
            intent=draft.intent,
            created_at=now,
            updated_at=now,
        )
        await store.add_review(uow.conn, review)
        return review

    fields = {"verb": "submit", "kind": kind, "draft": draft.__dict__, "category_id": category_id}
    return await _idempotent(db, principal, idempotency_key, fields, act)


async def get_review(db: Database, principal: Principal, review_id: str) -> Review:
    async with db.engine.connect() as conn:
        review = await store.get_review(conn, principal.project_id, review_id)
    if review is None:
        raise _not_found(review_id)
    return review


async def list_reviews(
    db: Database,
    principal: Principal,
    *,
    states: list[str],
    agent_id: str,
    category_id: str,
    cursor: str,
    limit: int,
) -> tuple[list[Review], str]:
    if limit < 0 or limit > LIST_LIMIT_MAX:
        raise DomainError(Code.BAD_REQUEST, f"limit must be between 1 and {LIST_LIMIT_MAX}.")
    limit = limit or LIST_LIMIT_DEFAULT
    if cursor and not cursor.startswith("rr_"):
        raise DomainError(
            Code.BAD_REQUEST, "cursor is not one this service issued; pass next_cursor as given."
        )
    async with db.engine.connect() as conn:
        rows = await store.list_reviews(
            conn,
            principal.project_id,
            states=states,
            agent_id=agent_id,
            category_id=category_id,
            before_id=cursor,
            limit=limit + 1,
        )
    next_cursor = rows[limit - 1].id if len(rows) > limit else ""
    return rows[:limit], next_cursor


async def _transition(
    uow: UnitOfWork,
    principal: Principal,
    review_id: str,
    verb: Verb,
    parent_revision: int,
) -> tuple[Review, Review]:
    """Load, check the table, compare-and-set. Returns (before, after); raises the spec's 409s."""
    review = await store.get_review(uow.conn, principal.project_id, review_id)
    if review is None:
        raise _not_found(review_id)
    actor = _actor(principal, review)
    target = check_transition(
        state=review.state,
        verb=verb,
        actor=actor,
        revision=review.revision,
        version=review.version,
        parent_revision=parent_revision,
        sent_message_id=review.message_id,
    )
    with tracer.start_as_current_span(
        "review.transition",
        attributes={
            "reviewloop.review_id": review.id,
            "from_state": review.state.value,
            "to_state": target.value,
            "actor_kind": actor.value,
        },
    ):
        updated = await store.compare_and_set(uow.conn, review, state=target, updated_at=utcnow())
    if updated is None:
        raise DomainError(
            Code.STALE,
            "Another writer changed the review at the same moment; re-read it and retry.",
            state=review.state,
            revision=review.revision,
            version=review.version,
        )
    return review, updated


async def cancel(
    db: Database, principal: Principal, review_id: str, parent_revision: int, idempotency_key: str
) -> Review:
    """Withdraw a review. Emits the terminal ``cancelled`` nudge; a cancel on an already-terminal
    review is ``409 terminal`` and leaves a ``front_run_next`` nudge with what happened."""
    try:

        async def act(uow: UnitOfWork) -> Review:
            before, after = await _transition(uow, principal, review_id, Verb.CANCEL, parent_revision)
            _emit_nudge(
                uow,
                after,
                "cancelled",
                {
                    "state": after.state.value,
                    "from_state": before.state.value,
                    "cancelled_by": principal.actor_kind.value,
                    "revision": after.revision,
                },
            )
            return after

        fields = {"verb": "cancel", "review_id": review_id, "parent_revision": parent_revision}
        return await _idempotent(db, principal, idempotency_key, fields, act)
    except DomainError as error:
        if error.code is Code.TERMINAL:
            await _front_run_next(db, principal, review_id, parent_revision)
        raise


async def _front_run_next(db: Database, principal: Principal, review_id: str, parent_revision: int) -> None:
    """The durable answer to a 409 terminal; the nudge service collapses repeats to one row."""
    async with db.transaction() as uow:
        review = await store.get_review(uow.conn, principal.project_id, review_id)
        if review is None or review.state not in CLOSED:
            return
        payload: dict[str, Any] = {
            "state": review.state.value,
            "your_parent_revision": parent_revision,
            "current_revision": review.revision,
            "diff_available": False,
        }
        if review.message_id:
            payload["sent_message_id"] = review.message_id
        _emit_nudge(uow, review, "front_run_next", payload)


async def ingest(db: Database, events: list[Any]) -> tuple[int, int]:
    """Events from the rules context. Deduplicated on event_id; types this build does not handle yet
    are recorded as received and logged, so a redelivery never loops."""
    accepted = duplicates = 0
    for event in events:
        async with db.transaction() as uow:
            if not await first_delivery(uow.conn, event.event_id):
                duplicates += 1
                continue
            accepted += 1
            log.info("review_state ignores event type %s (%s)", event.type, event.event_id)
    return accepted, duplicates
