"""Delivery: the one use case with two transactions around an I/O call.

The approval (with a delivery attempt row) commits first, then the provider is called, then the
outcome is recorded; an attempt whose outcome is unknown stays parked until ``reconcile`` recovers it
by Message-ID, never by resending.
"""

from __future__ import annotations

import logging
from datetime import datetime

from reviewloop.errors import DomainError
from reviewloop.ids import new_id
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.telemetry import REVIEW_ID, tracer

from review_state import store
from review_state.app import _kernel
from review_state.app._events import Facts
from review_state.app._gates import contacts_allow
from review_state.app.env import Env
from review_state.domain.feedback import decision_of, decisions_of
from review_state.domain.machine import Actor, Verb
from review_state.domain.mime import message_of, rfc_message_id
from review_state.domain.review import Review
from review_state.providers import OutcomeUnknown, Refused

log = logging.getLogger(__name__)

# A release by a reviewer ends `sent`; a direct or graduated one `auto_sent`.
_REVIEWED = ("human_reviewed", "reviewer_approved")


async def start_delivery(uow: UnitOfWork, review: Review, send_path: str, now: datetime) -> Review:
    """Record the attempt (and its ids) in the approval's own transaction, before any provider call."""
    message_id = new_id("msg")
    rfc_id = rfc_message_id(message_id, review.from_address)
    await store.start_attempt(uow.conn, review, message_id, rfc_id, send_path, now)
    updated = await store.compare_and_set(
        uow.conn, review, send_path=send_path, rfc_message_id=rfc_id, updated_at=now
    )
    assert updated is not None  # the row was written or CAS-locked by this transaction
    return updated


async def deliver(env: Env, review: Review) -> Review:
    """Hand an approved review to the provider and record the outcome. Blocks, suppression and the
    quota are checked again here, so a contact blocked after approval is never mailed."""
    try:
        await contacts_allow(env, review.project_id, review.recipients)
    except DomainError as refusal:
        return await _record_failure(env, review.id, f"{refusal.code.value}: {refusal.detail}")
    raw = message_of(review, utcnow())
    try:
        await env.provider.deliver(raw, review.from_address, review.recipients, review.rfc_message_id or "")
    except Refused as exc:
        return await _record_failure(env, review.id, str(exc))
    except OutcomeUnknown as exc:
        log.warning("delivery of %s has an unknown outcome (%s): parked for reconciliation", review.id, exc)
        return review
    except Exception:
        log.exception("delivery of %s failed after the provider call: parked for reconciliation", review.id)
        return review
    return await _record_delivered(env, review.id)


async def _record_delivered(env: Env, review_id: str) -> Review:
    async with env.db.transaction() as uow:
        review = await store.get_review_any(uow.conn, review_id)
        attempt = await store.get_attempt(uow.conn, review_id)
        assert review is not None and attempt is not None
        now = utcnow()
        if not await store.finish_attempt(uow.conn, review_id, "delivered", now):
            return review  # already recorded (by the sweep or a twin)
        turns = await store.list_turns(uow.conn, review_id)
        verb = Verb.DELIVERED if attempt.send_path in _REVIEWED else Verb.AUTO_DELIVERED
        sent = (
            await _kernel.move(
                uow,
                review,
                verb,
                Actor.SYSTEM,
                facts=Facts(decision=decision_of(decisions_of(turns))),
                message_id=attempt.message_id,
                sent_at=now,
                updated_at=now,
            )
        ).after
        await store.add_message(
            uow.conn,
            store.Message(
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
            ),
        )
        await store.mark_contacted(uow.conn, sent.project_id, sent.recipients, now)
    return sent


def _scrub(error: str) -> str:
    # Vendor-scrubbed: one line, no addresses of the relay's internals, bounded.
    return " ".join(error.split())[:300] or "the provider refused the message"


async def _record_failure(env: Env, review_id: str, error: str) -> Review:
    async with env.db.transaction() as uow:
        review = await store.get_review_any(uow.conn, review_id)
        assert review is not None
        if not await store.finish_attempt(uow.conn, review_id, "refused", utcnow(), _scrub(error)):
            return review
        edge = await _kernel.move(uow, review, Verb.DELIVERY_FAILED, Actor.SYSTEM, send_error=_scrub(error))
    return edge.after


async def reconcile(env: Env) -> int:
    """The sweep: recover each parked attempt by its Message-ID, never by sending again. Returns how
    many attempts it closed."""
    now = utcnow()
    async with env.db.engine.connect() as conn:
        parked = await store.parked_attempts(conn, now - env.settings.reconcile_after)
    closed = 0
    for attempt in parked:
        # The sweep's own span: its polls record nothing (telemetry.WorkRoots), a parked send does.
        with tracer.start_as_current_span("delivery.reconcile", attributes={REVIEW_ID: attempt.review_id}):
            delivered = await env.provider.was_delivered(attempt.rfc_message_id)
            if delivered:
                await _record_delivered(env, attempt.review_id)
            elif delivered is False:
                await _record_failure(
                    env, attempt.review_id, "the send was interrupted before the provider took it"
                )
            elif attempt.started_at < now - env.settings.reconcile_deadline:
                await _record_failure(env, attempt.review_id, "the provider could not confirm the delivery")
            else:
                continue
        closed += 1
    return closed
