"""Delivery: a durable step of its own, between an approval and the provider.

The approval commits the review and its delivery attempt in one unit of work. A worker (on any
replica) claims the attempt with a lease, outside the request's cancellation scope, and journals
``stage = data`` before the provider's DATA: a try that never reached it is retried with the same
Message-ID; one past it whose outcome is unknown is parked (``send_needs_reconciliation``) until
evidence (the provider's journal, the Sent folder over IMAP) or an operator closes it. Nothing ever
turns a parked attempt into ``failed`` by the clock. The sweep (at boot and periodically) claims what
a dead worker left and looks for evidence on parked attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.telemetry import REVIEW_ID, tracer
from reviewloop.tenancy import Principal

from review_state import store
from review_state.app import _kernel
from review_state.app._events import (
    NOT_SENT,
    POOLED_PATHS,
    SENT,
    UNKNOWN,
    publish_outcome,
    publish_pool_settled,
)
from review_state.app._gates import contacts_allow
from review_state.app.env import Env
from review_state.domain.feedback import decision_of, decisions_of, delivered_move
from review_state.domain.machine import Actor, State, Verb
from review_state.domain.mime import message_of, rfc_message_id
from review_state.domain.review import Move, Review
from review_state.providers import NotSent, OutcomeUnknown, Refused

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """The lease a release took on its own attempt, in its own transaction: this process's worker
    starts on it without claiming the attempt again (a statement, a round trip and a commit fewer)."""

    owner: str
    attempt: store.Attempt
    until: datetime


async def start_delivery(
    uow: UnitOfWork, review: Review, send_path: str, now: datetime, lease: timedelta
) -> tuple[Review, Claim]:
    """Record the attempt (and its ids) in the approval's own transaction, before any provider call."""
    send = send_columns(review, send_path)
    claim = await record_attempt(uow, review, send, now, lease)
    written = await store.compare_and_set(
        uow,
        review,
        replace(review, send_path=send_path, rfc_message_id=send["rfc_message_id"], updated_at=now),
    )
    assert written is not None  # the row was written or CAS-locked by this transaction
    return written[0], claim


def send_columns(review: Review, send_path: str) -> dict[str, str]:
    """The ids a release sends ``review`` under (``message_id`` is the attempt's, not a column)."""
    message_id = new_id("msg")
    return {
        "message_id": message_id,
        "rfc_message_id": rfc_message_id(message_id, review.from_address),
        "send_path": send_path,
    }


async def record_attempt(
    uow: UnitOfWork, approved: Review, send: dict[str, str], now: datetime, lease: timedelta
) -> Claim:
    """The attempt of a review whose approving compare-and-set already wrote ``send``'s columns,
    claimed for this process's worker (``deliver(..., claim)`` once the unit of work committed)."""
    owner = uuid.uuid4().hex
    attempt = store.start_attempt(uow, approved, send, now, owner, now + lease)
    return Claim(owner, attempt, now + lease)


def start_worker(
    env: Env, review_id: str, approved: Review | None = None, claim: Claim | None = None
) -> asyncio.Task[Review | None]:
    """This process's worker for the review's attempt: a task of its own, so a request that is
    cancelled (the gateway died) does not cancel the delivery it started. ``approved`` is the review
    as its approval committed it (its content is what goes out), which spares the worker a read;
    ``claim`` the lease that approval took, which spares it the claim."""
    task = env.workers.get(review_id)
    if task is None or task.done():
        task = asyncio.get_running_loop().create_task(_work(env, review_id, approved, claim))
        env.workers[review_id] = task

        def forget(done: asyncio.Task[Review | None]) -> None:
            if env.workers.get(review_id) is done:
                del env.workers[review_id]

        task.add_done_callback(forget)
    return task


async def deliver(env: Env, review: Review, claim: Claim | None = None) -> Review:
    """Drive an approved review's delivery and wait for it briefly (``delivery_wait_s``); the review
    as it then is: sent, failed, or still approved with its delivery under way or parked. ``claim``:
    the lease the call's own committed release took (never a replay's: its attempt may be past DATA)."""
    if review.state is not State.APPROVED:
        return review
    worker = start_worker(env, review.id, review, claim)
    with contextlib.suppress(TimeoutError):
        if closed := await asyncio.wait_for(asyncio.shield(worker), env.settings.delivery_wait_s):
            return closed  # the review as this worker's closing unit of work left it
    async with env.db.single_statement.connect() as conn:
        return await store.get_review_any(conn, review.id) or review


async def _work(
    env: Env, review_id: str, approved: Review | None, claim: Claim | None = None
) -> Review | None:
    """Claim the attempt (no-op when a live worker holds it or it is closed), unless the release's
    own ``claim`` still holds it, and run one try; the review as the try closed it (None when not)."""
    try:
        if claim is not None and utcnow() < claim.until:
            owner, attempt = claim.owner, claim.attempt
        else:
            owner = uuid.uuid4().hex  # this claim
            claimed = await claim_due(env, review_id, owner)
            if claimed is None:
                return None
            attempt = claimed
        async with _leased(env, review_id, owner):
            return await _try(env, attempt, owner, approved)
    except Exception:  # the store or the provider failed oddly: the lease lapses, the sweep retries
        log.exception("delivery of %s stopped; the sweep picks it up when its lease lapses", review_id)
        return None


async def claim_due(env: Env, review_id: str, owner: str) -> store.Attempt | None:
    """Take the attempt for this worker unless a live one holds it. The first claim of a release that
    waited out its undo window is where its decision stands for good: the category counts the review's
    outcome then, in the claim's unit, once (an undone one never counts)."""
    async with env.db.transaction() as uow:
        claimed = await store.claim_attempt(uow.conn, review_id, owner, utcnow(), env.settings.delivery_lease)
        if claimed is not None and claimed.release_at is not None and claimed.tries == 1:
            review = await store.get_review_any(uow.conn, review_id)
            assert review is not None  # an attempt's review is never deleted
            turns = await store.list_turns(uow.conn, review_id)
            publish_outcome(uow, review, decision_of(decisions_of(turns)))
    return claimed


@contextlib.asynccontextmanager
async def _leased(env: Env, review_id: str, owner: str) -> AsyncIterator[None]:
    """Renew the claim while the worker lives; a dead worker's claim lapses within one lease."""
    lease = env.settings.delivery_lease

    async def renew() -> None:
        while True:
            await asyncio.sleep(lease.total_seconds() / 3)
            async with env.db.one_statement() as conn:
                if not await store.renew_lease(conn, review_id, owner, utcnow() + lease):
                    return

    renewer = asyncio.get_running_loop().create_task(renew())
    try:
        yield
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await renewer


async def _try(env: Env, attempt: store.Attempt, owner: str, review: Review | None) -> Review | None:
    review_id = attempt.review_id
    if attempt.stage == store.DATA:
        # A worker died past DATA: only evidence may close it, never a blind resend.
        evidence = await env.provider.was_delivered(attempt.rfc_message_id)
        if evidence:
            return await _record_delivered(env, attempt.project_id, review_id)
        if evidence is None:
            await _park(env, review_id, owner)
            return None
        # The provider knows it never took the message: sending it now is not a resend.
    if review is None:
        async with env.db.single_statement.connect() as conn:
            review = await store.get_review_any(conn, review_id)
    assert review is not None
    try:
        facts = await contacts_allow(env, review.project_id, review.recipients)
    except DomainError as refusal:
        return await _record_failure(env, review_id, f"{refusal.code.value}: {refusal.detail}")
    reached = False

    async def at_data() -> None:
        nonlocal reached
        if attempt.stage != store.DATA:
            async with env.db.one_statement() as conn:
                if not await store.reach_data(conn, review_id, owner):
                    raise NotSent("another worker holds this delivery")
        reached = True

    try:
        await env.provider.deliver(
            message_of(review, utcnow()),
            review.from_address,
            review.recipients,
            attempt.rfc_message_id,
            at_data,
        )
    except Refused as exc:
        return await _record_failure(env, review_id, str(exc))
    except NotSent as exc:
        await _retry_later(env, attempt, owner, str(exc))
    except OutcomeUnknown as exc:
        if not reached:  # it never got to DATA: nothing can have gone out
            await _retry_later(env, attempt, owner, str(exc))
        else:
            log.warning("delivery of %s has an unknown outcome (%s): parked", review_id, exc)
            await _park(env, review_id, owner)
    else:
        return await _record_delivered(env, attempt.project_id, review_id, uncontacted=facts.uncontacted)
    return None


async def _retry_later(env: Env, attempt: store.Attempt, owner: str, error: str) -> None:
    if attempt.tries >= env.settings.delivery_max_tries:
        await _record_failure(env, attempt.review_id, f"{error}; gave up after {attempt.tries} tries")
        return
    backoff = min(env.settings.delivery_retry_base_s * 2 ** (attempt.tries - 1), 300.0)
    async with env.db.transaction() as uow:
        await store.requeue(
            uow.conn, attempt.review_id, owner, utcnow() + timedelta(seconds=backoff), _scrub(error)
        )


async def _park(env: Env, review_id: str, owner: str) -> None:
    async with env.db.transaction() as uow:
        if await store.park(uow.conn, review_id, owner, utcnow()):
            review = await store.get_review_any(uow.conn, review_id)
            if review is not None and review.send_path in POOLED_PATHS:
                publish_pool_settled(uow, review, UNKNOWN)  # it may have gone out: kept, never refunded


async def _record_delivered(
    env: Env,
    project_id: str,
    review_id: str,
    resolution: str | None = None,
    *,
    uncontacted: Sequence[str] | None = None,
) -> Review:
    """Close the attempt and the review as sent. ``uncontacted``: the recipients the send's own check
    read as never contacted (None: all of them); the others need no write, since a contact once
    contacted stays so. The review is read first, on a connection of its own; the attempt's close is in
    the move's own compare-and-set, so one closed already (by the sweep, a twin) leaves it as it is."""
    async with env.db.single_statement.connect() as conn:
        found = await store.get_review_with_delivery(conn, project_id, review_id)
    assert found is not None  # an attempt's review is never deleted
    review, turns, attempt = found
    if attempt is None or attempt.status != "in_flight":
        return review
    now = utcnow()
    step = delivered_move(review, turns, attempt.send_path, attempt.message_id, now)
    finishing = store.finish_params(review_id, "delivered", now, None, resolution)
    try:
        async with env.db.transaction() as uow:
            edge = await _kernel.move(
                uow, review, Actor.SYSTEM, step, store.Cas(finishing=finishing, last=True)
            )
            sent = edge.after
            store.add_message(uow, _sent_message(sent, attempt, now))
            await store.mark_contacted(
                uow.conn, sent.project_id, sent.recipients if uncontacted is None else uncontacted, now
            )
            if attempt.send_path in POOLED_PATHS:
                publish_pool_settled(uow, sent, SENT)
    except DomainError as error:
        if error.code is not Code.STALE:
            raise
        async with env.db.single_statement.connect() as conn:  # recorded by the sweep or a twin
            closed = await store.get_review_any(conn, review_id)
        assert closed is not None
        return closed
    return sent


def _sent_message(sent: Review, attempt: store.Attempt, now: datetime) -> store.Message:
    """The outbound message a delivered review leaves in its thread."""
    return store.Message(
        id=attempt.message_id,
        org_id=sent.org_id,
        project_id=sent.project_id,
        direction="outbound",
        rfc_message_id=attempt.rfc_message_id,
        references_hdr=sent.references_hdr or "",
        thread_ref=sent.thread_ref or new_id("thread"),
        from_address=sent.from_address,
        to=[*sent.to],
        cc=[*sent.cc],
        subject=sent.subject,
        body_text=sent.body_text,
        headers=dict(sent.headers),
        created_at=now,
        review_id=sent.id,
    )


def _scrub(error: str) -> str:
    # Vendor-scrubbed: one line, no addresses of the relay's internals, bounded.
    return " ".join(error.split())[:300] or "the provider refused the message"


async def _record_failure(env: Env, review_id: str, error: str, resolution: str | None = None) -> Review:
    async with env.db.transaction() as uow:
        review = await store.get_review_any(uow.conn, review_id)
        assert review is not None
        if (
            await store.finish_attempt(
                uow.conn, review_id, "refused", utcnow(), _scrub(error), resolution=resolution
            )
            is None
        ):
            return review
        edge = await _kernel.move(
            uow,
            review,
            Actor.SYSTEM,
            Move(Verb.DELIVERY_FAILED, changed=replace(review, send_error=_scrub(error))),
        )
        if review.send_path in POOLED_PATHS:
            # The send never happened (refused before or at DATA, or given up before it): the shared
            # pool's unit comes back, in this unit of work, through the outbox.
            publish_pool_settled(uow, review, NOT_SENT)
    return edge.after


async def reconcile(env: Env) -> int:
    """The sweep: recover each parked attempt by its Message-ID, never by sending again, then run every
    attempt no live worker holds (never tried, due for a retry, disowned by the provider, or left by a
    dead worker). Returns how many parked attempts it closed or requeued."""
    async with env.db.engine.connect() as conn:
        parked = await store.parked_attempts(conn)
    moved = 0
    for attempt in parked:
        # The sweep's own span: its polls record nothing (telemetry.WorkRoots), a parked send does.
        with tracer.start_as_current_span("delivery.reconcile", attributes={REVIEW_ID: attempt.review_id}):
            evidence = await env.provider.was_delivered(attempt.rfc_message_id)
            if evidence:
                await _record_delivered(env, attempt.project_id, attempt.review_id)
            elif evidence is False:  # the provider knows it never took it: sending is not a resend
                async with env.db.transaction() as uow:
                    await store.requeue(uow.conn, attempt.review_id, None, utcnow(), None)
            else:
                continue
        moved += 1
    async with env.db.engine.connect() as conn:
        due = await store.due_attempts(conn, utcnow())
    await asyncio.gather(*(start_worker(env, review_id) for review_id in due))
    return moved


async def resolve_delivery(
    env: Env, principal: Principal, review_id: str, outcome: str, reason: str
) -> Review:
    """The operator's verb for a parked attempt: "mark delivered" / "mark failed", with a reason, from
    evidence the platform cannot see (the relay's logs, the recipient)."""
    _kernel.require_admin(principal)
    if outcome not in ("delivered", "failed"):
        raise invalid("/outcome", "must be delivered or failed")
    reason = " ".join(reason.split())
    if not reason:
        raise invalid("/reason", "say what the evidence is")
    async with env.db.engine.connect() as conn:
        review = await _kernel.load(conn, principal, review_id)
        attempt = await store.get_attempt(conn, review_id)
    if attempt is None or attempt.status != "in_flight" or attempt.stage != store.PARKED:
        raise DomainError(
            Code.WRONG_STATE,
            "Only a parked delivery (send_needs_reconciliation) is resolved by hand; this one is "
            f"{delivery_status(attempt) if attempt else 'not started'}.",
            state=review.state,
            revision=review.revision,
            version=review.version,
        )
    resolution = f"{principal.actor_id}: {reason}"[:500]
    if outcome == "delivered":
        return await _record_delivered(env, principal.project_id, review_id, resolution)
    return await _record_failure(env, review_id, f"marked failed by an operator: {reason}", resolution)


def delivery_status(attempt: store.Attempt) -> str:
    """queued | sending | send_needs_reconciliation | delivered | failed."""
    if attempt.status == "delivered":
        return "delivered"
    if attempt.status != "in_flight":
        return "failed"
    return {store.QUEUED: "queued", store.DATA: "sending"}.get(attempt.stage, "send_needs_reconciliation")


async def get_delivery(env: Env, principal: Principal, review_id: str) -> store.Attempt | None:
    """The review's delivery attempt, for ``get_review`` (which has read the review): None before its
    approval, and for a review of another project. One statement, outside a transaction."""
    async with env.db.single_statement.connect() as conn:
        return await store.get_attempt(conn, review_id, principal.project_id)
