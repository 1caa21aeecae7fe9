"""review_state use cases: one function per RPC, one transaction each.

Calls to other contexts (rules, diff, dispatch_budget) happen before the transaction that writes, so a
peer that is down fails the request closed with ``unavailable`` and nothing is written. Delivery is the
one use case with two transactions around an I/O call: the approval (with a delivery attempt row)
commits first, then the provider is called, then the outcome is recorded; an attempt whose outcome is
unknown stays parked until ``reconcile`` recovers it by Message-ID, never by resending.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError, FieldViolation, http_status, invalid
from reviewloop.ids import new_id
from reviewloop.storage import Database, UnitOfWork, first_delivery, utcnow
from reviewloop.telemetry import tracer
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.exc import IntegrityError

from review_state import store
from review_state.clients import Collaborators
from review_state.delivery import OutcomeUnknown, Provider, Refused
from review_state.domain.feedback import DecisionTurn, decision_of, outcome_for_rules
from review_state.domain.machine import (
    CLOSED,
    Actor,
    State,
    Verb,
    allowed_actions,
    check_transition,
)
from review_state.domain.mime import build_message
from review_state.domain.submission import (
    CHAT_MAX,
    GRADUATED,
    Attachment,
    Draft,
    Policy,
    Route,
    auto_send_hold,
    breaker,
    check_intent,
    is_address,
    materialize,
    parse_policy,
    resolve_policy,
    route_for,
    validate_draft,
)
from review_state.store import Review, Turn

log = logging.getLogger(__name__)

NUDGE = "nudge"  # the outbox destination that turns these events into nudges
RULES = "rules"  # review outcomes, per category
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200
SUGGESTED_BATCH = 3  # propagate_general_rule: a few drafts at a time, never the whole queue
CHAT_RETRIES = 3  # chat is not a CAS verb: a lost race is retried, not reported
QUOTA_WINDOW = timedelta(days=1)  # the outbound quota counts messages sent in the last 24 hours


@dataclass(frozen=True)
class Settings:
    """review_state's own configuration, read once at boot."""

    from_address: str = "agent@reviewloop.local"
    outbound_quota_per_day: int = 10_000
    # An in-flight attempt older than this has an unknown outcome and is reconciled by Message-ID.
    reconcile_after: timedelta = timedelta(seconds=60)
    # A parked attempt the provider cannot confirm by then is closed as failed (never resent).
    reconcile_deadline: timedelta = timedelta(hours=1)
    sweep_interval_s: float = 15.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        return cls(
            from_address=env.get("REVIEWLOOP_FROM_ADDRESS", cls.from_address),
            outbound_quota_per_day=int(
                env.get("REVIEWLOOP_OUTBOUND_QUOTA_PER_DAY", cls.outbound_quota_per_day)
            ),
            reconcile_after=timedelta(seconds=float(env.get("REVIEWLOOP_RECONCILE_AFTER_S", 60))),
            sweep_interval_s=float(env.get("REVIEWLOOP_RECONCILE_SWEEP_S", cls.sweep_interval_s)),
        )


@dataclass
class Env:
    """The composition root the use cases run in: the store, the other contexts, the mail provider."""

    db: Database
    peers: Collaborators
    provider: Provider
    settings: Settings = field(default_factory=Settings)


# --- helpers ------------------------------------------------------------------------------------


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


def _require_admin(principal: Principal) -> None:
    if principal.actor_kind is not ActorKind.ADMIN:
        raise DomainError(Code.FORBIDDEN_ACTOR, "This is a console verb: it takes an admin key.")


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


def _emit_outcome(uow: UnitOfWork, review: Review, decision: str) -> None:
    outcome = outcome_for_rules(decision)
    if outcome and review.category_id:
        uow.emit(
            RULES,
            review.id,
            "review_outcome",
            {
                "review_id": review.id,
                "org_id": review.org_id,
                "project_id": review.project_id,
                "category_id": review.category_id,
                "outcome": outcome,
            },
        )


def _request_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _timestamp(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _span(review: Review, target: State, actor: Actor) -> Any:
    """The domain span of one state change (DESIGN.md "Traces")."""
    return tracer.start_as_current_span(
        "review.transition",
        attributes={
            "reviewloop.review_id": review.id,
            "from_state": review.state.value,
            "to_state": target.value,
            "actor_kind": actor.value,
        },
    )


Act = Callable[[UnitOfWork], Awaitable[tuple[Review, str]]]


async def _replayed(
    db: Database, principal: Principal, key: str, fields: dict[str, Any]
) -> tuple[Review, str] | None:
    """The earlier result of this Idempotency-Key, checked before any peer is called."""
    if not key:
        return None
    async with db.engine.connect() as conn:
        return await _seen(conn, principal, key, _request_hash(fields))


async def _seen(conn: Any, principal: Principal, key: str, request_hash: str) -> tuple[Review, str] | None:
    seen = await store.find_idempotent(conn, principal.project_id, principal.actor_id, key)
    if seen is None:
        return None
    if seen.request_hash != request_hash:
        raise DomainError(
            Code.IDEMPOTENCY_CONFLICT,
            "This Idempotency-Key was already used with a different request body; "
            "use a new key for a new request.",
        )
    review = await store.get_review(conn, principal.project_id, seen.review_id)
    if review is None:
        raise _not_found(seen.review_id)
    return review, seen.result_id


async def _idempotent(
    db: Database, principal: Principal, key: str, fields: dict[str, Any], act: Act
) -> tuple[Review, str, bool]:
    """Run ``act`` once per Idempotency-Key: a retry with the same body gets the review as it now is
    (and the first call's result id); the same key with another body is ``idempotency_conflict``.
    Returns (review, result_id, replayed)."""
    if not key:
        async with db.transaction() as uow:
            review, result_id = await act(uow)
        return review, result_id, False
    request_hash = _request_hash(fields)
    for _ in range(2):  # a concurrent twin may win the key's insert; the second pass then reads it
        try:
            async with db.transaction() as uow:
                seen = await _seen(uow.conn, principal, key, request_hash)
                if seen is not None:
                    return seen[0], seen[1], True
                review, result_id = await act(uow)
                await store.remember_idempotent(
                    uow.conn,
                    principal.project_id,
                    principal.actor_id,
                    key,
                    request_hash,
                    review.id,
                    utcnow(),
                    result_id,
                )
                return review, result_id, False
        except IntegrityError:
            continue
    raise DomainError(Code.CONFLICT, "A concurrent request with this Idempotency-Key is in flight; retry.")


async def _load(conn: Any, principal: Principal, review_id: str) -> Review:
    review = await store.get_review(conn, principal.project_id, review_id)
    if review is None:
        raise _not_found(review_id)
    return review


async def _transition(
    uow: UnitOfWork,
    principal: Principal,
    review_id: str,
    verb: Verb,
    parent_revision: int | None,
    *,
    expected_version: int | None = None,
    actor: Actor | None = None,
    **changes: Any,
) -> tuple[Review, Review]:
    """Load, check the table, compare-and-set. Returns (before, after); raises the spec's 409s.
    ``parent_revision`` None means "not a CAS verb" (chat): the current revision is used."""
    review = await _load(uow.conn, principal, review_id)
    actor = actor or _actor(principal, review)
    target = check_transition(
        state=review.state,
        verb=verb,
        actor=actor,
        revision=review.revision,
        version=review.version,
        parent_revision=review.revision if parent_revision is None else parent_revision,
        expected_version=expected_version,
        sent_message_id=review.message_id,
    )
    with _span(review, target, actor):
        updated = await store.compare_and_set(uow.conn, review, state=target, updated_at=utcnow(), **changes)
    if updated is None:
        # Another writer committed between our read and our write: report the row as it now is.
        now = await store.get_review(uow.conn, principal.project_id, review_id) or review
        raise DomainError(
            Code.STALE,
            f"Another writer changed the review at the same moment (it is now revision {now.revision}, "
            f"version {now.version}); re-read it, re-apply your change on top, and retry.",
            state=now.state,
            revision=now.revision,
            version=now.version,
            allowed_actions=allowed_actions(now.state, actor),
        )
    return review, updated


async def _front_run_next(db: Database, principal: Principal, review_id: str, parent_revision: int) -> None:
    """The durable answer to a 409 terminal; the nudge service collapses repeats to one row."""
    async with db.transaction() as uow:
        review = await store.get_review(uow.conn, principal.project_id, review_id)
        if review is None or review.state not in CLOSED:
            return
        turns = await store.list_turns(uow.conn, review.id)
        payload: dict[str, Any] = {
            "state": review.state.value,
            "your_parent_revision": parent_revision,
            "current_revision": review.revision,
            "diff_available": any(t.diff_json is not None for t in turns),
        }
        if review.message_id:
            payload["sent_message_id"] = review.message_id
        _emit_nudge(uow, review, "front_run_next", payload)


async def _guard(
    db: Database,
    principal: Principal,
    review_id: str,
    parent_revision: int,
    run: Callable[[], Awaitable[Any]],
) -> Any:
    """Runs a mutation; a ``409 terminal`` also leaves a ``front_run_next`` nudge with what happened."""
    try:
        return await run()
    except DomainError as error:
        if error.code is Code.TERMINAL:
            await _front_run_next(db, principal, review_id, parent_revision)
        raise


async def _precheck(
    db: Database,
    principal: Principal,
    review_id: str,
    verb: Verb,
    parent_revision: int,
    expected_version: int | None = None,
) -> Review:
    """The table's verdict before any peer is called, so a 409 costs no remote call."""
    async with db.engine.connect() as conn:
        review = await _load(conn, principal, review_id)
    check_transition(
        state=review.state,
        verb=verb,
        actor=_actor(principal, review),
        revision=review.revision,
        version=review.version,
        parent_revision=parent_revision,
        expected_version=expected_version,
        sent_message_id=review.message_id,
    )
    return review


async def _sending_facts(conn: Any, project_id: str, addresses: list[str]) -> store.SendingFacts:
    return await store.sending_facts(conn, project_id, addresses, utcnow() - QUOTA_WINDOW)


def _check_contacts(env: Env, facts: store.SendingFacts) -> None:
    """Blocks, unsubscribe suppression and the outbound quota: checked at submit and at delivery,
    before the intent gate (an intent would not fix them)."""
    if facts.blocked:
        raise DomainError(
            Code.RECIPIENT_BLOCKED,
            f"{', '.join(facts.blocked)} is on this project's block list; remove the recipient. "
            "Nothing was queued.",
            hints=tuple(("recipient", a) for a in facts.blocked),
        )
    if facts.suppressed:
        raise DomainError(
            Code.RECIPIENT_SUPPRESSED,
            f"{', '.join(facts.suppressed)} unsubscribed from this project's mail; remove the recipient. "
            "Nothing was queued.",
            hints=tuple(("recipient", a) for a in facts.suppressed),
        )
    quota = env.settings.outbound_quota_per_day
    if facts.sent_since >= quota:
        raise DomainError(
            Code.QUOTA_EXCEEDED,
            f"This project sent its outbound quota of {quota} messages in the last 24 hours; "
            "try again later. Nothing was queued.",
        )


async def _check_token(env: Env, principal: Principal, token: str, category_id: str) -> int:
    """The token's rule high-water, or the 4xx the spec names. STALE is ``409 born_stale`` (the caller
    adds the nudge); EXPIRED / INVALID tell the agent to fetch the stack again."""
    check = await env.peers.validate_token(principal, token, category_id)
    if check.status == "valid":
        return check.token_rule_high_water
    if check.status == "stale":
        raise DomainError(
            Code.BORN_STALE,
            f"This draft was composed against rule high-water {check.token_rule_high_water}, but the rules "
            f"are at {check.current_rule_high_water}. Nothing changed: call get_rules, re-apply the stack, "
            "and resubmit with its new composition_token (or restamp_review if nothing needed to change).",
            hints=(("retry_with", "get_rules"),),
        )
    raise invalid(
        "/composition_token",
        f"the token is {check.status}; fetch the rules again with get_rules and retry with its "
        "composition_token. Nothing was sent and nothing was queued",
    )


# --- submit ---------------------------------------------------------------------------------------


async def _parent(env: Env, principal: Principal, kind: str, parent_message_id: str) -> store.Message | None:
    if kind == "send":
        return None
    if not parent_message_id:
        raise DomainError(
            Code.REPLY_CONTEXT_REQUIRED,
            f"A {kind} names the message it answers: use /v1/messages/{{id}}/{kind}.",
        )
    async with env.db.engine.connect() as conn:
        parent = await store.get_message(conn, principal.project_id, parent_message_id)
    if parent is None:
        raise DomainError(Code.NOT_FOUND, f"No message {parent_message_id} is visible to this key.")
    return parent


def _rfc_message_id(message_id: str, from_address: str) -> str:
    domain = from_address.rpartition("@")[2] or "reviewloop.local"
    return f"<{message_id}@{domain}>"


async def submit(
    env: Env,
    principal: Principal,
    *,
    kind: str,
    draft: Draft,
    category_id: str,
    idempotency_key: str,
    parent_message_id: str = "",
    confidence: float | None = None,
    composition_token: str = "",
) -> tuple[str, Review]:
    """Create a review for a send, reply or forward; the resolved review policy decides what happens.

    Order (spec 000): shape, then blocks / suppression / quota, then the intent gate; nothing is
    stored for a refusal. Returns (status, review): ``queued_for_review``, ``sent`` or ``failed``."""
    if principal.actor_kind is not ActorKind.AGENT:
        raise DomainError(Code.FORBIDDEN_ACTOR, "Only an agent key composes outbound messages.")
    if confidence is not None and not 0.0 <= confidence <= 1.0:
        raise invalid("/confidence", "must be between 0 and 1")
    fields = {
        "verb": "submit",
        "kind": kind,
        "parent": parent_message_id,
        "draft": draft.fingerprint(),
        "category_id": category_id,
        "confidence": confidence,
        "token": composition_token,
    }
    replay = await _replayed(env.db, principal, idempotency_key, fields)
    if replay is not None:
        return _status(replay[0]), replay[0]
    parent = await _parent(env, principal, kind, parent_message_id)
    draft, threading = materialize(kind, draft, parent.as_parent() if parent else None)
    validate_draft(draft)
    recipients = [*draft.to, *draft.cc, *draft.bcc]
    async with env.db.engine.connect() as conn:
        facts = await _sending_facts(conn, principal.project_id, recipients)
    _check_contacts(env, facts)
    policy, _ = resolve_policy(facts.policy)
    first_contact = facts.first_contact
    route = route_for(policy, draft.intent)
    rule_high_water = 0
    if composition_token:
        rule_high_water = await _check_token(env, principal, composition_token, category_id)
    review_id = new_id("rr")
    hold: str | None = None
    if route is Route.AUTO_CANDIDATE:
        hold = await _auto_send_gate(env, principal, review_id, category_id, confidence, first_contact)

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        now = utcnow()
        released = route is Route.DIRECT or (route is Route.AUTO_CANDIDATE and hold is None)
        review = Review(
            id=review_id,
            org_id=principal.org_id,
            project_id=principal.project_id,
            agent_id=principal.actor_id,
            category_id=category_id,
            kind=kind,
            state=State.APPROVED if released else State.NEEDS_REVIEW,
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
            body_html=draft.body_html,
            reply_to=draft.reply_to,
            headers=dict(draft.headers),
            attachments=tuple(draft.attachments),
            from_address=_from_address(env, parent),
            confidence=confidence,
            rule_high_water=rule_high_water,
            parent_message_id=parent.id if parent else None,
            in_reply_to=threading.in_reply_to,
            references_hdr=threading.references,
            thread_ref=threading.thread_ref,
            gate_outcome=(f"held:{hold}" if hold else "") if route is Route.AUTO_CANDIDATE else None,
        )
        await store.add_review(uow.conn, review)
        if released:
            path = "agent_direct" if route is Route.DIRECT else "graduated_auto"
            review = await _start_delivery(uow, review, path, now)
        return review, ""

    review, _, replayed = await _idempotent(env.db, principal, idempotency_key, fields, act)
    if not replayed and review.state is State.APPROVED:
        review = await deliver(env, review)
    return _status(review), review


def _from_address(env: Env, parent: store.Message | None) -> str:
    # A reply goes out from the address the inbound mail was sent to.
    if parent is not None and parent.direction == "inbound" and parent.to:
        return parent.to[0]
    if parent is not None and parent.direction == "outbound":
        return parent.from_address
    return env.settings.from_address


def _status(review: Review) -> str:
    if review.state in (State.SENT, State.AUTO_SENT):
        return "sent"
    if review.state is State.FAILED:
        return "failed"
    if review.state is State.APPROVED:
        return "sending"
    return "queued_for_review"


async def _auto_send_gate(
    env: Env,
    principal: Principal,
    review_id: str,
    category_id: str,
    confidence: float | None,
    first_contact: bool,
) -> str | None:
    """``auto_send_graduated``: the hold reason, or None when the category is graduated, every gate
    passes and the daily cap had room (spent atomically by dispatch_budget)."""
    if not category_id:
        return "no_category"
    category = await env.peers.get_category(principal, category_id)
    graduated = category.state in GRADUATED and not category.never_graduate
    dial = await env.peers.get_dial(principal, category_id) if graduated else None
    hold = auto_send_hold(
        category_id=category_id,
        category_state=category.state,
        never_graduate=category.never_graduate,
        dial=dial,
        confidence=confidence,
        first_contact=first_contact,
        review_id=review_id,
    )
    if (
        hold is None
        and dial is not None
        and not await env.peers.consume_auto_send(
            principal, category_id, review_id, dial.auto_send_cap_per_day
        )
    ):
        hold = "daily_cap"
    return hold


# --- delivery -------------------------------------------------------------------------------------


async def _start_delivery(uow: UnitOfWork, review: Review, send_path: str, now: datetime) -> Review:
    """Record the attempt (and its ids) in the approval's own transaction, before any provider call."""
    message_id = new_id("msg")
    rfc_message_id = _rfc_message_id(message_id, review.from_address)
    await store.start_attempt(uow.conn, review, message_id, rfc_message_id, send_path, now)
    updated = await store.compare_and_set(
        uow.conn, review, send_path=send_path, rfc_message_id=rfc_message_id, updated_at=now
    )
    assert updated is not None  # the row was written or CAS-locked by this transaction
    return updated


def _raw_message(review: Review, now: datetime) -> bytes:
    return build_message(
        from_address=review.from_address,
        to=review.to,
        cc=review.cc,
        subject=review.subject,
        body_text=review.body_text,
        body_html=review.body_html,
        reply_to=review.reply_to,
        headers=review.headers,
        attachments=review.attachments,
        rfc_message_id=review.rfc_message_id or "",
        in_reply_to=review.in_reply_to,
        references=review.references_hdr,
        date=now,
    )


async def deliver(env: Env, review: Review) -> Review:
    """Hand an approved review to the provider and record the outcome. Blocks, suppression and the
    quota are checked again here, so a contact blocked after approval is never mailed."""
    try:
        async with env.db.engine.connect() as conn:
            facts = await _sending_facts(conn, review.project_id, [*review.to, *review.cc, *review.bcc])
        _check_contacts(env, facts)
    except DomainError as refusal:
        return await _record_failure(env, review.id, f"{refusal.code.value}: {refusal.detail}")
    raw = _raw_message(review, utcnow())
    try:
        await env.provider.deliver(
            raw, review.from_address, [*review.to, *review.cc, *review.bcc], review.rfc_message_id or ""
        )
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
        assert review is not None
        attempt = await store.get_attempt(uow.conn, review_id)
        now = utcnow()
        if not await store.finish_attempt(uow.conn, review_id, "delivered", now):
            return review  # already recorded (by the sweep or a twin)
        verb = (
            Verb.DELIVERED
            if attempt.send_path in ("human_reviewed", "reviewer_approved")
            else Verb.AUTO_DELIVERED
        )
        target = check_transition(
            state=review.state,
            verb=verb,
            actor=Actor.SYSTEM,
            revision=review.revision,
            version=review.version,
            parent_revision=review.revision,
        )
        with _span(review, target, Actor.SYSTEM):
            sent = await store.compare_and_set(
                uow.conn,
                review,
                state=target,
                message_id=attempt.message_id,
                sent_at=now,
                updated_at=now,
            )
        assert sent is not None
        thread_ref = sent.thread_ref or new_id("thread")
        await store.add_message(
            uow.conn,
            store.Message(
                id=attempt.message_id,
                org_id=sent.org_id,
                project_id=sent.project_id,
                direction="outbound",
                rfc_message_id=attempt.rfc_message_id,
                references_hdr=sent.references_hdr or "",
                thread_ref=thread_ref,
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
        await store.mark_contacted(uow.conn, sent.project_id, [*sent.to, *sent.cc, *sent.bcc], now)
        turns = await store.list_turns(uow.conn, review_id)
        payload: dict[str, Any] = {
            "state": sent.state.value,
            "message_id": attempt.message_id,
            "send_path": attempt.send_path,
            "sent_at": _timestamp(now),
        }
        if sent.state is State.SENT:
            payload["decision"] = decision_of(_decisions(turns))
        else:
            payload["gate_outcome"] = sent.gate_outcome or ""
        if sent.thread_ref:
            payload["thread_ref"] = sent.thread_ref
        _emit_nudge(uow, sent, "sent", payload)
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
        target = check_transition(
            state=review.state,
            verb=Verb.DELIVERY_FAILED,
            actor=Actor.SYSTEM,
            revision=review.revision,
            version=review.version,
            parent_revision=review.revision,
        )
        with _span(review, target, Actor.SYSTEM):
            failed = await store.compare_and_set(
                uow.conn, review, state=target, send_error=_scrub(error), updated_at=utcnow()
            )
        assert failed is not None
        _emit_nudge(
            uow,
            failed,
            "send_failed",
            {
                "state": "failed",
                "error": failed.send_error,
                "from_state": "approved",
                "agent_retryable": False,
                "next_action": "compose_and_submit_a_new_message",
            },
        )
    return failed


async def reconcile(env: Env) -> int:
    """The sweep: recover each parked attempt by its Message-ID, never by sending again. Returns how
    many attempts it closed."""
    now = utcnow()
    async with env.db.engine.connect() as conn:
        parked = await store.parked_attempts(conn, now - env.settings.reconcile_after)
    closed = 0
    for attempt in parked:
        delivered = await env.provider.was_delivered(attempt.rfc_message_id)
        if delivered:
            await _record_delivered(env, attempt.review_id)
        elif delivered is False:
            await _record_failure(
                env, attempt.review_id, "the send was interrupted before the provider took it"
            )
        elif attempt.started_at.replace(tzinfo=now.tzinfo) < now - env.settings.reconcile_deadline:
            await _record_failure(env, attempt.review_id, "the provider could not confirm the delivery")
        else:
            continue
        closed += 1
    return closed


# --- reads ----------------------------------------------------------------------------------------


async def get_review(env: Env, principal: Principal, review_id: str) -> tuple[Review, list[Turn]]:
    async with env.db.single_statement.connect() as conn:
        found = await store.get_review_with_turns(conn, principal.project_id, review_id)
    if found is None:
        raise _not_found(review_id)
    return found


async def list_reviews(
    env: Env,
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
    async with env.db.single_statement.connect() as conn:
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


def _decisions(turns: list[Turn]) -> list[DecisionTurn]:
    return [DecisionTurn(t.action, t.changed) for t in turns if t.turn_type == "decision"]


@dataclass(frozen=True)
class Feedback:
    review_id: str
    decision: str
    diff_unified: str
    diff_json: dict[str, Any] | None
    comments: list[Turn]
    new_rules: list[str]


async def get_feedback(env: Env, principal: Principal, review_id: str) -> Feedback:
    """The human's assembled decision; ``decision`` is derived exactly as the ``sent`` nudge's."""
    review, turns = await get_review(env, principal, review_id)
    edits = [t for t in turns if t.turn_type == "decision" and t.diff_json is not None]
    comments = [t for t in turns if t.actor_kind in ("human", "review_agent") and t.body]
    return Feedback(
        review_id=review.id,
        decision=decision_of(_decisions(turns)),
        diff_unified=edits[-1].diff_unified or "" if edits else "",
        diff_json=edits[-1].diff_json if edits else None,
        comments=comments,
        new_rules=[rule for t in turns for rule in t.rule_ids],
    )


# --- composer mutations ---------------------------------------------------------------------------


async def cancel(
    env: Env, principal: Principal, review_id: str, parent_revision: int, idempotency_key: str
) -> Review:
    """Withdraw a review (from `failed`, the one close-out). Emits the terminal ``cancelled`` nudge."""

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
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
        return after, ""

    fields = {"verb": "cancel", "review_id": review_id, "parent_revision": parent_revision}

    async def run() -> Review:
        return (await _idempotent(env.db, principal, idempotency_key, fields, act))[0]

    result: Review = await _guard(env.db, principal, review_id, parent_revision, run)
    return result


@dataclass(frozen=True)
class Revision:
    """A redraft: every field None keeps the draft's value; ``attachments=()`` clears them."""

    subject: str | None = None
    body_text: str | None = None
    body_html: str | None = None
    to: list[str] | None = None
    cc: list[str] | None = None
    bcc: list[str] | None = None
    reply_to: str | None = None
    headers: dict[str, str] | None = None
    attachments: tuple[Attachment, ...] | None = None
    intent: dict[str, Any] | None = None
    confidence: float | None = None

    def apply(self, review: Review) -> Draft:
        def pick(new: Any, old: Any) -> Any:
            return old if new is None else new

        return Draft(
            to=pick(self.to, review.to),
            cc=pick(self.cc, review.cc),
            bcc=pick(self.bcc, review.bcc),
            subject=pick(self.subject, review.subject),
            body_text=pick(self.body_text, review.body_text),
            intent=pick(self.intent, review.intent),
            body_html=pick(self.body_html, review.body_html),
            reply_to=pick(self.reply_to, review.reply_to),
            headers=pick(self.headers, review.headers),
            attachments=pick(self.attachments, review.attachments),
        )

    def fingerprint(self) -> dict[str, Any]:
        body = {k: v for k, v in self.__dict__.items() if k != "attachments"}
        if self.attachments is not None:
            body["attachments"] = [
                [a.filename, a.content_type, hashlib.sha256(a.content).hexdigest()] for a in self.attachments
            ]
        return body


async def _born_stale(env: Env, principal: Principal, review_id: str, error: DomainError) -> DomainError:
    """A stale composition token: no mutation, a fresh ``rule_changed`` nudge, and the 409 with facts."""
    async with env.db.transaction() as uow:
        review = await _load(uow.conn, principal, review_id)
        _emit_nudge(
            uow,
            review,
            "rule_changed",
            {"born_stale": True, "revision": review.revision, "detail": error.detail},
        )
    error.state, error.revision, error.version = review.state, review.revision, review.version
    error.allowed_actions = allowed_actions(review.state, _actor(principal, review))
    return error


async def _token_high_water(env: Env, principal: Principal, review: Review, token: str) -> int | None:
    if not token:
        return None
    try:
        return await _check_token(env, principal, token, review.category_id)
    except DomainError as error:
        if error.code is Code.BORN_STALE:
            raise await _born_stale(env, principal, review.id, error) from None
        raise


async def submit_revision(
    env: Env,
    principal: Principal,
    review_id: str,
    parent_revision: int,
    revision: Revision,
    *,
    composition_token: str = "",
    idempotency_key: str = "",
) -> Review:
    """A redraft from needs_review, chatting or rejected: bumps ``revision`` and returns to needs_review."""
    fields = {
        "verb": "submit_revision",
        "review_id": review_id,
        "parent_revision": parent_revision,
        "revision": revision.fingerprint(),
        "token": composition_token,
    }

    async def run() -> Review:
        replay = await _replayed(env.db, principal, idempotency_key, fields)
        if replay is not None:
            return replay[0]
        current = await _precheck(env.db, principal, review_id, Verb.SUBMIT_REVISION, parent_revision)
        draft = revision.apply(current)
        validate_draft(draft)
        if revision.intent is not None:
            check_intent(revision.intent)
        if revision.confidence is not None and not 0.0 <= revision.confidence <= 1.0:
            raise invalid("/confidence", "must be between 0 and 1")
        async with env.db.engine.connect() as conn:
            facts = await _sending_facts(conn, principal.project_id, [*draft.to, *draft.cc, *draft.bcc])
        _check_contacts(env, facts)
        high_water = await _token_high_water(env, principal, current, composition_token)

        async def act(uow: UnitOfWork) -> tuple[Review, str]:
            before = await _load(uow.conn, principal, review_id)
            _, after = await _transition(
                uow,
                principal,
                review_id,
                Verb.SUBMIT_REVISION,
                parent_revision,
                revision=before.revision + 1,
                to=list(draft.to),
                cc=list(draft.cc),
                bcc=list(draft.bcc),
                subject=draft.subject,
                body_text=draft.body_text,
                body_html=draft.body_html,
                reply_to=draft.reply_to,
                headers=dict(draft.headers),
                attachments=tuple(draft.attachments),
                intent=draft.intent,
                confidence=before.confidence if revision.confidence is None else revision.confidence,
                rule_high_water=before.rule_high_water if high_water is None else high_water,
            )
            await _add_turn(uow, after, principal, "revision", "")
            return after, ""

        return (await _idempotent(env.db, principal, idempotency_key, fields, act))[0]

    result: Review = await _guard(env.db, principal, review_id, parent_revision, run)
    return result


async def restamp(
    env: Env,
    principal: Principal,
    review_id: str,
    parent_revision: int,
    *,
    composition_token: str = "",
    idempotency_key: str = "",
) -> Review:
    """The honest "I re-read the rules and nothing needed to change": no new revision; records the
    token's rule high-water so the draft stops counting as born stale."""
    fields = {
        "verb": "restamp",
        "review_id": review_id,
        "parent_revision": parent_revision,
        "token": composition_token,
    }

    async def run() -> Review:
        replay = await _replayed(env.db, principal, idempotency_key, fields)
        if replay is not None:
            return replay[0]
        current = await _precheck(env.db, principal, review_id, Verb.RESTAMP, parent_revision)
        high_water = await _token_high_water(env, principal, current, composition_token)

        async def act(uow: UnitOfWork) -> tuple[Review, str]:
            before = await _load(uow.conn, principal, review_id)
            _, after = await _transition(
                uow,
                principal,
                review_id,
                Verb.RESTAMP,
                parent_revision,
                rule_high_water=before.rule_high_water if high_water is None else high_water,
            )
            await _add_turn(uow, after, principal, "restamp", "")
            return after, ""

        return (await _idempotent(env.db, principal, idempotency_key, fields, act))[0]

    result: Review = await _guard(env.db, principal, review_id, parent_revision, run)
    return result


_ACTOR_KIND = {
    ActorKind.AGENT: "agent",
    ActorKind.HUMAN: "human",
    ActorKind.ADMIN: "human",
    ActorKind.REVIEW_AGENT: "review_agent",
    ActorKind.SYSTEM: "system",
}


async def _add_turn(
    uow: UnitOfWork,
    review: Review,
    principal: Principal,
    turn_type: str,
    body: str,
    *,
    actor_kind: str | None = None,
    **extra: Any,
) -> Turn:
    return await store.add_turn(
        uow.conn,
        Turn(
            id=new_id("turn"),
            review_id=review.id,
            seq=0,
            turn_type=turn_type,
            actor_kind=actor_kind or _ACTOR_KIND[principal.actor_kind],
            actor_id=principal.actor_id,
            body=body,
            revision=review.revision,
            created_at=utcnow(),
            **extra,
        ),
    )


async def post_chat(
    env: Env, principal: Principal, review_id: str, text: str, idempotency_key: str = ""
) -> tuple[Review, Turn]:
    """A chat turn: the composer's ``agent_question`` (emits nothing; the first chat flips
    in_review -> chatting; from needs_review it posts without opening the draft) or a human's
    comment (emits ``feedback_added``). Not a CAS verb; idempotent on the Idempotency-Key."""
    text = text.strip()
    if not text or len(text) > CHAT_MAX:
        raise invalid("/text", f"must be 1-{CHAT_MAX} characters")
    fields = {"verb": "chat", "review_id": review_id, "text": text}

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        _, after = await _transition(uow, principal, review_id, Verb.POST_CHAT, None)
        human = principal.actor_kind in (ActorKind.HUMAN, ActorKind.ADMIN)
        turn = await _add_turn(uow, after, principal, "human_comment" if human else "agent_question", text)
        if human:
            _emit_nudge(
                uow,
                after,
                "feedback_added",
                {"turn_id": turn.id, "actor_kind": "human", "body": text, "revision": after.revision},
            )
        return after, turn.id

    async def run() -> tuple[Review, Turn]:
        for attempt in range(CHAT_RETRIES):
            try:
                review, turn_id, _ = await _idempotent(env.db, principal, idempotency_key, fields, act)
            except DomainError as error:
                if error.code is Code.STALE and attempt + 1 < CHAT_RETRIES:
                    continue  # a concurrent writer moved the row; chat names no revision, so retry
                raise
            async with env.db.engine.connect() as conn:
                turn = await store.get_turn(conn, turn_id)
            assert turn is not None
            return review, turn
        raise AssertionError("unreachable")  # pragma: no cover

    async with env.db.engine.connect() as conn:
        current = await _load(conn, principal, review_id)
    result: tuple[Review, Turn] = await _guard(env.db, principal, review_id, current.revision, run)
    return result


# --- the human and review-agent planes ------------------------------------------------------------


async def open_review(
    env: Env, principal: Principal, review_id: str, revision: int, version: int, idempotency_key: str = ""
) -> Review:
    """A human picks a draft up: needs_review -> in_review, with the (revision, version) CAS."""
    fields = {"verb": "open", "review_id": review_id, "revision": revision, "version": version}

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        _, after = await _transition(uow, principal, review_id, Verb.OPEN, revision, expected_version=version)
        await _add_turn(uow, after, principal, "opened", "")
        return after, ""

    async def run() -> Review:
        return (await _idempotent(env.db, principal, idempotency_key, fields, act))[0]

    result: Review = await _guard(env.db, principal, review_id, revision, run)
    return result


_VERBS = {"approve": Verb.APPROVE, "edit": Verb.EDIT, "reject": Verb.REJECT, "escalate": Verb.ESCALATE}


@dataclass(frozen=True)
class Decision:
    action: str
    revision: int
    version: int
    subject: str | None = None
    body: str | None = None
    feedback: str = ""
    new_rule: dict[str, str] | None = None


@dataclass(frozen=True)
class ReviewerResult:
    kind: str  # sent | sent_to_human
    review: Review
    forced_by_breaker: str = ""


def _verb(decision: Decision) -> Verb:
    verb = _VERBS.get(decision.action)
    if verb is None:
        raise invalid("/action", "must be approve, edit, reject or escalate")
    if verb is Verb.EDIT and decision.subject is None and decision.body is None:
        raise invalid("/body", "an edit carries the new subject and/or body")
    if verb is not Verb.EDIT and (decision.subject is not None or decision.body is not None):
        raise invalid("/action", "subject and body are only for an edit")
    if decision.subject is not None and ("\n" in decision.subject or len(decision.subject) > 998):
        raise invalid("/subject", "must be one line of at most 998 characters")
    if len(decision.feedback) > CHAT_MAX:
        raise invalid("/feedback", f"at most {CHAT_MAX} characters")
    return verb


def _fields_of(review: Review) -> dict[str, Any]:
    return {
        "subject": review.subject,
        "body_text": review.body_text,
        "body_html": review.body_html,
        "to": review.to,
        "cc": review.cc,
        "bcc": review.bcc,
        "reply_to": review.reply_to,
        "headers": review.headers,
    }


async def _edit_diff(
    env: Env, principal: Principal, current: Review, decision: Decision
) -> tuple[dict[str, Any], Any]:
    """The edit's new fields and its diff from the diff service (stored on the decision turn)."""
    after = {"subject": current.subject, "body_text": current.body_text}
    if decision.subject is not None:
        after["subject"] = decision.subject
    if decision.body is not None:
        after["body_text"] = decision.body
    try:
        diff = await env.peers.compute_diff(
            principal,
            current.id,
            current.revision,
            current.revision + 1,
            _fields_of(current),
            {**_fields_of(current), **after},
        )
    except DomainError as error:
        if error.code is not Code.CONFLICT:
            raise
        # Another edit of this revision already stored its diff: that edit won the draft.
        async with env.db.engine.connect() as conn:
            now = await _load(conn, principal, current.id)
        raise DomainError(
            Code.STALE,
            "Another reviewer edited this revision first; re-read the review and decide on the current one.",
            state=now.state,
            revision=now.revision,
            version=now.version,
            allowed_actions=allowed_actions(now.state, _actor(principal, now)),
        ) from None
    return after, diff


def _decision_changes(
    verb: Verb, current: Review, edited: dict[str, Any] | None, now: datetime
) -> dict[str, Any]:
    changes: dict[str, Any] = {"decided_at": now}
    if verb is Verb.EDIT and edited is not None:
        changes.update(edited)
    if verb in (Verb.EDIT, Verb.REJECT, Verb.ESCALATE):
        # A reviewer's move starts a new generation of the draft: a composer still naming the old
        # revision is stale, which is what lets exactly one of concurrent writers win.
        changes["revision"] = current.revision + 1
    return changes


async def _decide(
    env: Env, principal: Principal, review_id: str, decision: Decision, idempotency_key: str, actor: Actor
) -> tuple[Review, str]:
    verb = _verb(decision)
    fields = {"verb": f"decide:{actor}", "review_id": review_id, **decision.__dict__}
    replay = await _replayed(env.db, principal, idempotency_key, fields)
    if replay is not None:
        return replay[0], ""
    current = await _precheck(env.db, principal, review_id, verb, decision.revision, decision.version)
    hold: str | None = None
    receipt: str | None = None
    if actor is Actor.REVIEW_AGENT:
        # Every review-agent round is admitted by dispatch_budget before it acts; a spent budget is
        # the hop limit, and the draft goes to a human whatever the reviewer decided.
        receipt = await env.peers.admit_reviewer_round(
            principal,
            review_id,
            f"{review_id}:{decision.revision}:{decision.version}",
            first_round=current.reviewer_hops == 0,
        )
        if receipt is None:
            hold = "max_hops_reached"
        elif verb in (Verb.APPROVE, Verb.EDIT):
            hold = await _reviewer_breaker(env, principal, current)
    try:
        review = await _apply_decision(
            env, principal, current, decision, verb, actor, hold, fields, idempotency_key
        )
    except DomainError as error:
        if receipt is not None and http_status(error.code) == 409:
            # A concurrent writer won after admission: the round ends without a verdict. Any other
            # failure (a peer down) leaves the receipt open, so retrying this decision reattaches to it.
            await _settle_round(env, principal, receipt, no_verdict_reason="superseded")
        raise
    if receipt is not None:
        await _settle_round(env, principal, receipt, verdict="pass" if verb is Verb.APPROVE else "issues")
    return review, hold or ""


async def _settle_round(env: Env, principal: Principal, receipt: str, **outcome: str) -> None:
    """Record how an admitted round ended. The decision has already happened either way; an
    unsettled receipt stays spent (dispatch_budget fails closed), so a lost settlement only logs."""
    try:
        await env.peers.settle_reviewer_round(principal, receipt, **outcome)
    except DomainError as error:
        log.warning("review-agent round %s not settled: %s", receipt, error)


async def _apply_decision(
    env: Env,
    principal: Principal,
    current: Review,
    decision: Decision,
    verb: Verb,
    actor: Actor,
    hold: str | None,
    fields: dict[str, Any],
    idempotency_key: str,
) -> Review:
    review_id = current.id
    edited: dict[str, Any] | None = None
    diff = None
    if verb is Verb.EDIT and hold is None:
        edited, diff = await _edit_diff(env, principal, current, decision)
    rule_ids: list[str] = []
    if decision.new_rule and hold is None:
        rule_ids.append(
            await env.peers.save_rule(
                principal,
                rule_text=decision.new_rule["rule_text"],
                scope=decision.new_rule.get("scope") or "general",
                category_id=decision.new_rule.get("category_id") or current.category_id,
                source_review_id=review_id,
                key=f"{review_id}:{decision.revision}:{decision.version}:rule",
            )
        )

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        now = utcnow()
        if hold is not None:
            return await _hold(uow, principal, review_id, decision, hold)
        before = await _load(uow.conn, principal, review_id)
        _, after = await _transition(
            uow,
            principal,
            review_id,
            verb,
            decision.revision,
            expected_version=decision.version,
            **_decision_changes(verb, before, edited, now),
            # Each review-agent round is a hop, counted here for the reader; dispatch_budget bounds them.
            reviewer_hops=before.reviewer_hops + (actor is Actor.REVIEW_AGENT),
        )
        changed = edited is not None and (
            edited["subject"] != before.subject or edited["body_text"] != before.body_text
        )
        await _add_turn(
            uow,
            after,
            principal,
            "decision",
            decision.feedback,
            action=decision.action,
            changed=changed,
            diff_json=orjson.loads(diff.diff_json) if diff is not None and diff.diff_json else None,
            diff_unified=diff.diff_unified if diff is not None else None,
            rule_ids=rule_ids,
        )
        outcome = decision_of([DecisionTurn(decision.action, changed)])
        _emit_outcome(uow, after, outcome)
        by = "human" if actor is Actor.HUMAN else "review_agent"
        if verb is Verb.REJECT and actor is Actor.HUMAN:
            _emit_nudge(
                uow, after, "rejected", {"revision": after.revision, "feedback": decision.feedback, "by": by}
            )
        elif verb in (Verb.REJECT, Verb.ESCALATE):
            _emit_nudge(
                uow,
                after,
                "redraft_requested",
                {
                    "revision": after.revision,
                    "by": by,
                    "action": decision.action,
                    "feedback": decision.feedback,
                },
            )
        if after.state is State.APPROVED:
            path = "human_reviewed" if actor is Actor.HUMAN else "reviewer_approved"
            after = await _start_delivery(uow, after, path, now)
        return after, ""

    review, _, replayed = await _idempotent(env.db, principal, idempotency_key, fields, act)
    if not replayed and review.state is State.APPROVED:
        review = await deliver(env, review)
    return review


async def _hold(
    uow: UnitOfWork, principal: Principal, review_id: str, decision: Decision, breaker_name: str
) -> tuple[Review, str]:
    """A circuit breaker overrode a review agent's release: the draft stays in the human queue."""
    before = await _load(uow.conn, principal, review_id)
    _, after = await _transition(
        uow,
        principal,
        review_id,
        Verb.HOLD,
        decision.revision,
        expected_version=decision.version,
        actor=Actor.SYSTEM,
        gate_outcome=f"held:{breaker_name}",
        reviewer_hops=before.reviewer_hops + 1,
    )
    await _add_turn(uow, after, principal, "breaker", decision.feedback, action=decision.action)
    _emit_nudge(
        uow,
        after,
        "redraft_requested",
        {"revision": after.revision, "by": "breaker", "forced_by_breaker": breaker_name},
    )
    return after, breaker_name


async def _reviewer_breaker(env: Env, principal: Principal, review: Review) -> str | None:
    """The circuit breakers of the review-agent plane, by name, or None when the release may go out."""
    dial = await env.peers.get_dial(principal, review.category_id)
    async with env.db.engine.connect() as conn:
        facts = await _sending_facts(conn, review.project_id, [*review.to, *review.cc, *review.bcc])
    tripped = breaker(
        dial=dial, confidence=review.confidence, first_contact=facts.first_contact, review_id=review.id
    )
    # The daily cap is per category (dispatch_budget keys it so); an uncategorized draft has none.
    if (
        tripped is None
        and review.category_id
        and not await env.peers.consume_auto_send(
            principal, review.category_id, review.id, dial.auto_send_cap_per_day
        )
    ):
        tripped = "daily_cap"
    return tripped


async def decide(
    env: Env, principal: Principal, review_id: str, decision: Decision, idempotency_key: str = ""
) -> Review:
    """A human decides approve | edit | reject | escalate with the (revision, version) CAS."""
    if principal.actor_kind not in (ActorKind.HUMAN, ActorKind.ADMIN):
        raise DomainError(Code.FORBIDDEN_ACTOR, "Decisions on this plane take a human key.")

    async def run() -> Review:
        return (await _decide(env, principal, review_id, decision, idempotency_key, Actor.HUMAN))[0]

    result: Review = await _guard(env.db, principal, review_id, decision.revision, run)
    return result


async def reviewer_decide(
    env: Env, principal: Principal, review_id: str, decision: Decision, idempotency_key: str = ""
) -> ReviewerResult:
    """A linked review agent decides a pending draft; a tripped breaker returns it to the human."""
    if principal.actor_kind is not ActorKind.REVIEW_AGENT:
        raise DomainError(Code.FORBIDDEN_ACTOR, "The reviewer plane takes a review_agent key.")
    if decision.new_rule:
        raise invalid("/new_rule", "only a human attaches a new rule to a decision")

    async def run() -> tuple[Review, str]:
        return await _decide(env, principal, review_id, decision, idempotency_key, Actor.REVIEW_AGENT)

    review, forced = await _guard(env.db, principal, review_id, decision.revision, run)
    released = review.state in (State.APPROVED, State.SENT, State.FAILED) and not forced
    return ReviewerResult("sent" if released else "sent_to_human", review, forced)


# --- console: inbound mail, policy, contacts -------------------------------------------------------


def _header(headers: Mapping[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "")


async def record_inbound(
    env: Env,
    principal: Principal,
    *,
    from_address: str,
    to: list[str],
    cc: list[str],
    subject: str,
    body_text: str,
    headers: dict[str, str],
) -> store.Message:
    """Record a received message so replies and forwards have a parent; threads by In-Reply-To /
    References when they name a message this project knows."""
    _require_admin(principal)
    problems = []
    if not is_address(from_address):
        problems.append(FieldViolation("/from", f"{from_address!r} is not an email address"))
    if not to:
        problems.append(FieldViolation("/to", "at least one recipient is required"))
    problems += [
        FieldViolation(f"/to/{i}", f"{a!r} is not an email address")
        for i, a in enumerate(to)
        if not is_address(a)
    ]
    problems += [
        FieldViolation(f"/cc/{i}", f"{a!r} is not an email address")
        for i, a in enumerate(cc)
        if not is_address(a)
    ]
    if problems:
        raise DomainError(
            Code.BAD_REQUEST,
            "; ".join(f"{p.field}: {p.description}" for p in problems),
            violations=tuple(problems),
        )
    message_id = new_id("msg")
    rfc_message_id = _header(headers, "Message-ID") or _rfc_message_id(message_id, from_address)
    references = " ".join(x for x in (_header(headers, "References"), _header(headers, "In-Reply-To")) if x)
    async with env.db.transaction() as uow:
        if _header(headers, "Message-ID"):
            # A provider webhook retries: the same Message-ID is the same message, recorded once.
            seen = await store.message_by_rfc_id(uow.conn, principal.project_id, rfc_message_id)
            if seen is not None and seen.direction == "inbound":
                return seen
        thread_ref = ""
        for ref in reversed(references.split()):
            known = await store.message_by_rfc_id(uow.conn, principal.project_id, ref)
            if known is not None:
                thread_ref = known.thread_ref
                break
        message = store.Message(
            id=message_id,
            org_id=principal.org_id,
            project_id=principal.project_id,
            direction="inbound",
            rfc_message_id=rfc_message_id,
            references_hdr=_header(headers, "References"),
            thread_ref=thread_ref or new_id("thread"),
            from_address=from_address,
            to=to,
            cc=cc,
            subject=subject,
            body_text=body_text,
            headers=headers,
            created_at=utcnow(),
        )
        await store.add_message(uow.conn, message)
        await store.mark_contacted(uow.conn, principal.project_id, [from_address], message.created_at)
    return message


async def get_policy(env: Env, principal: Principal) -> tuple[str, str]:
    async with env.db.engine.connect() as conn:
        policy, source = resolve_policy(await store.get_policy(conn, principal.project_id))
    return policy.value, source


async def set_policy(env: Env, principal: Principal, policy: str) -> tuple[str, str]:
    """Console only: an agent can never widen its own policy."""
    _require_admin(principal)
    chosen: Policy = parse_policy(policy)
    async with env.db.transaction() as uow:
        await store.set_policy(
            uow.conn, principal.org_id, principal.project_id, chosen.value, principal.actor_id, utcnow()
        )
    return chosen.value, "project"


async def flag_contact(env: Env, principal: Principal, address: str, flag: str) -> dict[str, Any]:
    _require_admin(principal)
    if not is_address(address):
        raise invalid("/address", f"{address!r} is not an email address")
    async with env.db.transaction() as uow:
        return await store.flag_contact(uow.conn, principal.project_id, address, flag, utcnow())


# --- events from rules ----------------------------------------------------------------------------


async def ingest(env: Env, events: list[Any]) -> tuple[int, int]:
    """Events from the rules context, deduplicated on event_id: a rule change nudges every pending
    draft in its scope (``rule_changed`` for a category rule, ``propagate_general_rule`` with its
    siblings and a small ``suggested_batch`` for a general one); a graduation or reconciliation
    nudges ``recheck_category``."""
    accepted = duplicates = 0
    for event in events:
        async with env.db.transaction() as uow:
            if not await first_delivery(uow.conn, event.event_id):
                duplicates += 1
                continue
            accepted += 1
            try:
                body = orjson.loads(event.payload)
            except orjson.JSONDecodeError:
                log.error("review_state dropped an unreadable %s event (%s)", event.type, event.event_id)
                continue
            if event.type == "rule_changed":
                await _rule_changed(uow, body)
            elif event.type == "category_changed":
                await _category_changed(uow, body)
            else:
                log.info("review_state ignores event type %s (%s)", event.type, event.event_id)
    return accepted, duplicates


async def _rule_changed(uow: UnitOfWork, body: dict[str, Any]) -> None:
    general = body.get("scope") != "category"
    high_water = int(body.get("rule_high_water") or 0)
    drafts = await store.pending_in_scope(
        uow.conn,
        org_id=body["org_id"],
        project_id=body.get("project_id", ""),
        category_id="" if general else body.get("category_id", ""),
        agent_id=body.get("agent_id", ""),
    )
    drafts = [d for d in drafts if not high_water or d.rule_high_water < high_water]
    per_category: dict[str, int] = {}
    for draft in drafts:
        per_category[draft.category_id] = per_category.get(draft.category_id, 0) + 1
    rule = body.get("rule", {})
    for draft in drafts:
        if general:
            payload = {
                "rule": {"id": rule.get("id", ""), "rule_text": rule.get("rule_text", "")},
                "siblings": {
                    "category_id": draft.category_id,
                    "pending_count": per_category[draft.category_id] - 1,
                },
                "suggested_batch": SUGGESTED_BATCH,
                "rule_high_water": high_water,
            }
            _emit_nudge(uow, draft, "propagate_general_rule", payload)
        else:
            payload = {"rule": rule, "rule_high_water": high_water, "revision": draft.revision}
            _emit_nudge(uow, draft, "rule_changed", payload)


async def _category_changed(uow: UnitOfWork, body: dict[str, Any]) -> None:
    if not body.get("category_id"):
        return
    drafts = await store.pending_in_scope(
        uow.conn,
        org_id=body["org_id"],
        project_id=body.get("project_id", ""),
        category_id=body["category_id"],
        agent_id="",
    )
    for draft in drafts:
        _emit_nudge(
            uow,
            draft,
            "recheck_category",
            {
                "category_id": body["category_id"],
                "state": body.get("state", ""),
                "reason": body.get("reason", ""),
            },
        )
