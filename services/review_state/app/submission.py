"""``submit``: a send, reply or forward becomes a review, and the resolved review policy decides
whether it is queued for a reviewer, released directly, or auto-sent (spec 000 "Where a review comes
from")."""

from __future__ import annotations

import asyncio
from dataclasses import asdict

from reviewloop.errors import Code, DomainError, FieldViolation, invalid
from reviewloop.ids import new_id
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal

from review_state import store
from review_state.app import _kernel
from review_state.app._events import NOT_SENT, publish_humans_notified, publish_pool_settled
from review_state.app._gates import (
    auto_send_gate,
    check_contacts,
    check_token,
    deadline_minutes,
    refund_uncommitted,
    sending_facts,
    spend_cap,
)
from review_state.app.delivery import Claim, deliver, start_delivery
from review_state.app.env import Env
from review_state.clients import PoolSend
from review_state.domain.decision import review_deadline
from review_state.domain.machine import State
from review_state.domain.review import Review, Turn
from review_state.domain.submission import (
    HUMANS_NOTIFIED,
    Asked,
    Draft,
    Route,
    check_reply_context,
    materialize,
    notifies_humans,
    resolve_policy,
    route_for,
    validate_draft,
)


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
    asked: Asked | None = None,
) -> tuple[str, Review]:
    """Create a review for a send, reply or forward; the resolved review policy decides what happens.

    Order (spec 000): shape, then the reply's thread (one that moved since the agent read it is
    ``409 reply_context_changed``), then blocks / suppression / quota, then the intent gate; nothing is
    stored for a refusal. Returns (status, review): ``queued_for_review`` or ``sent``."""
    if principal.actor_kind is not ActorKind.AGENT:
        raise DomainError(Code.FORBIDDEN_SCOPE, "Only an agent key composes outbound messages.")
    if confidence is not None and not 0.0 <= confidence <= 1.0:
        raise invalid("/confidence", "must be between 0 and 1")
    asked = asked or Asked()
    asked.validate()
    fields = {
        "verb": "submit",
        "kind": kind,
        "parent": parent_message_id,
        "draft": draft.fingerprint(),
        "category_id": category_id,
        "confidence": confidence,
        "token": composition_token,
        # Keys stored before a field of ``Asked`` was added still match: a default is left out.
        **({"asked": _asked_fields(asked)} if asked != Asked() else {}),
    }
    # The replay check and the contacts' facts share one connection (a pool checkout costs more than
    # either read); a replay or a refused draft reads nothing more. A keyed send knows its recipients
    # before any read (its draft's own): its key and their facts are one statement.
    async with env.db.single_statement.connect() as conn:
        facts = None
        if kind == "send" and idempotency_key:
            key = (principal.actor_id, idempotency_key)
            facts = await sending_facts(conn, principal.project_id, draft.recipients, principal.org_id, key)
            replay = await _kernel.replay_of(conn, principal, facts.remembered, fields)
        else:
            replay = await _kernel.replayed(conn, principal, idempotency_key, fields)
        if replay is None:
            parent = await _parent(env, principal, kind, parent_message_id, asked)
            from_address = asked.inbox or _from_address(env, parent)
            draft, threading = materialize(
                kind,
                draft,
                parent.as_parent() if parent else None,
                reply_all=asked.reply_all,
                inbox=from_address,
            )
            validate_draft(draft)
            if facts is None:
                facts = await sending_facts(conn, principal.project_id, draft.recipients, principal.org_id)
    if replay is not None:
        review = await deliver(env, replay[0])
        return _status(review), review
    assert facts is not None  # read with the key, or once the draft was checked
    check_contacts(env, facts)
    policy, source = resolve_policy(facts.policy, facts.account_policy)
    route = route_for(policy, draft.intent, source, asked.mode)
    if not composition_token and facts.require_composition_token:
        raise token_required(kind)
    generation = env.stacks.generation
    high_water = (
        check_token(env, principal, composition_token, category_id)
        if composition_token
        else _stack_high_water(env, principal, category_id)
    )
    rule_high_water, minutes = await asyncio.gather(
        high_water, deadline_minutes(env, principal, "" if route is Route.DIRECT else category_id)
    )
    review_id = new_id("rr")
    hold: str | None = None
    rung, cap = "", 0
    if route is Route.AUTO_CANDIDATE:
        hold, rung, cap = await auto_send_gate(
            env, principal, review_id, category_id, confidence, facts.first_contact
        )
    # The shared-pool governor: a release no human reviewed spends a unit of its From domain's
    # deployment-wide budget before its unit of work; a held or uncommitted release gives it back.
    pooled = False
    if route is Route.DIRECT or (route is Route.AUTO_CANDIDATE and hold is None):
        spent = await env.peers.consume_pool_send(principal, from_address, review_id)
        if spent.allowed:
            pooled = True
        elif route is Route.DIRECT:
            raise pool_spent(spent)
        else:
            hold = "pool_budget"  # queued for a human, as every other gate holds

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        nonlocal rule_high_water, generation
        if kind == "reply" and threading.thread_ref and not asked.second_reply:
            # Read in the unit that writes the reply, writers of the thread serialized (store.pending_reply).
            await _no_reply_pending(uow, principal, threading.thread_ref)
        if not composition_token and generation != env.stacks.generation:
            generation = env.stacks.generation  # a rule moved since the stack was read: read it again
            rule_high_water = await _stack_high_water(env, principal, category_id)
        now = utcnow()
        held = hold
        if (
            route is Route.AUTO_CANDIDATE
            and held is None
            and not await spend_cap(uow, principal.project_id, category_id, cap)
        ):
            held = "daily_cap"  # spent in this unit: a twin or a failed insert spends nothing
        released = route is Route.DIRECT or (route is Route.AUTO_CANDIDATE and held is None)
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
            from_address=from_address,
            confidence=confidence,
            rule_high_water=rule_high_water,
            # Without a token the draft named no rule snapshot: the high-water above is the stack's now
            # (a rule saved after it still leaves it stale), not rules its agent read.
            rule_snapshot_unnamed=not composition_token,
            parent_message_id=parent.id if parent else None,
            in_reply_to=threading.in_reply_to,
            references_hdr=threading.references,
            thread_ref=threading.thread_ref,
            gate_outcome=(f"held:{held}" if held else "") if route is Route.AUTO_CANDIDATE else None,
            review_deadline=None if released else review_deadline(now, minutes),
            mode=asked.mode or None,
        )
        store.add_review(uow, review)
        if released:
            await uow.flush()  # the release writes the review's turn and delivery against its row
        if pooled and not released:  # held by the daily cap in this unit: the unit comes back with it
            publish_pool_settled(uow, review, NOT_SENT)
        if released and route is Route.AUTO_CANDIDATE and notifies_humans(rung):
            await _notify_humans(uow, review)
        if released:
            path = "agent_direct" if route is Route.DIRECT else "graduated_auto"
            review, claim = await start_delivery(uow, review, path, now, env.settings.delivery_lease)
            claims.append(claim)
        return review, ""

    claims: list[Claim] = []  # the lease of the attempt this call's release recorded, by run
    try:
        review, _, replayed = await _kernel.once(
            env.db, principal, idempotency_key, fields, act, checked=True
        )
    except BaseException:
        if pooled:
            await refund_uncommitted(env, principal, review_id)
        raise
    if pooled and review.id != review_id:  # an Idempotency-Key twin committed first: ours never will
        await refund_uncommitted(env, principal, review_id)
    # A replay drives a delivery its first call left unfinished, claiming it as any worker does.
    review = await deliver(env, review, None if replayed or not claims else claims[-1])
    return _status(review), review


def pool_spent(spent: PoolSend) -> DomainError:
    """``403 quota_exceeded``: the sending pool's deployment-wide daily budget is spent (spec 000's
    outbound quota, checked at submit): nothing was sent and nothing was queued."""
    return DomainError(
        Code.QUOTA_EXCEEDED,
        f"The shared sending pool {spent.pool} spent its daily auto-send budget ({spent.used_today}/"
        f"{spent.budget_per_day}, every org sending from that domain counts): nothing was sent and nothing "
        "was queued. Submit with an intent for a human to review, or try again after 00:00 UTC.",
        hints=(
            ("send_pool", spent.pool),
            ("send_pool_budget", f"{spent.used_today}/{spent.budget_per_day}"),
            ("retry_with", "submit_with_intent_for_review"),
        ),
    )


def token_required(kind: str) -> DomainError:
    """The project requires every send, reply and forward to name the rule snapshot it was composed under."""
    how = (
        "this project requires a composition_token: call get_rules (GET /v1/rules, unfiltered: a scope-filtered "
        "query returns none), apply the rules it returns, and pass its composition_token with the "
        f"{kind}; a token expires, so fetch it again when it does"
    )
    return DomainError(
        Code.BAD_REQUEST,
        f"/composition_token: {how}.",
        violations=(FieldViolation("/composition_token", how),),
        hints=(("retry_with", "get_rules"),),
    )


def _asked_fields(asked: Asked) -> dict[str, object]:
    fields = asdict(asked)
    if not asked.second_reply:
        del fields["second_reply"]
    return fields


async def _no_reply_pending(uow: UnitOfWork, principal: Principal, thread_ref: str) -> None:
    """``409 reply_already_pending`` when a reply to the thread is still pending (not yet sent, cancelled
    or failed), naming it: revise that one, or say ``second_reply: true`` to mean a second."""
    pending = await store.pending_reply(uow.conn, principal.project_id, thread_ref)
    if pending is not None:
        raise DomainError(
            Code.REPLY_ALREADY_PENDING,
            f"Thread {thread_ref} already has a reply pending: review {pending}. Revise it (get_review, then "
            "submit_revision) or cancel it; if you mean to send a second reply beside it, resubmit with "
            '"second_reply": true.',
            hints=(("review_id", pending), ("thread_id", thread_ref)),
        )


async def _notify_humans(uow: UnitOfWork, review: Review) -> None:
    """An auto-send in an ``auto_notify`` category tells the project's humans: a turn on the review,
    in the unit that releases it, which the console lists (``ReviewFilter(humans_notified=True)``),
    and an event the project's webhooks can ask for."""
    turn_id = new_id("turn")
    await store.add_turn(
        uow.conn,
        Turn(
            id=turn_id,
            review_id=review.id,
            seq=0,
            turn_type=HUMANS_NOTIFIED,
            actor_kind="system",
            actor_id="review_state",
            body=f"Auto-sent without review: category {review.category_id} is auto_notify.",
            revision=review.revision,
            created_at=review.created_at,
        ),
    )
    publish_humans_notified(uow, review, turn_id)


async def _stack_high_water(env: Env, principal: Principal, category_id: str) -> int:
    """The high-water a draft without a token was composed under: the stack's now, which a later
    redraft without a token is checked against (born_stale fails closed). A submit does not need the
    rules context: when it cannot say, 0 (the oldest) makes that redraft prove itself with a token.
    Remembered for a while (``RuleStacks``): a value older than the stack's only fails closed."""
    key = (principal.org_id, principal.project_id, principal.actor_id, category_id)
    try:
        return await env.stacks.high_water(key, lambda: env.peers.stack_high_water(principal, category_id))
    except DomainError as error:
        if error.code not in (Code.UNAVAILABLE, Code.NOT_FOUND):
            raise
        return 0


async def _parent(
    env: Env, principal: Principal, kind: str, parent_message_id: str, asked: Asked
) -> store.Message | None:
    """The message a reply or forward answers: the one named, or a reply's thread's newest. A reply
    that says what it read of the thread is checked against the thread as it is now."""
    if kind == "send":
        return None
    if not parent_message_id and not (kind == "reply" and asked.thread_id):
        raise DomainError(
            Code.REPLY_CONTEXT_REQUIRED,
            f"A {kind} names the message it answers: use /v1/messages/{{id}}/{kind}"
            + (" or /v1/threads/{id}/reply." if kind == "reply" else "."),
        )
    async with env.db.engine.connect() as conn:
        thread = None
        if not parent_message_id:
            thread = await store.thread_context(conn, principal.project_id, asked.thread_id)
            if thread is None:
                raise DomainError(Code.NOT_FOUND, f"No thread {asked.thread_id} is visible to this key.")
            parent_message_id = thread.last_message_id
        parent = await store.get_message(conn, principal.project_id, parent_message_id)
        if parent is None:
            raise DomainError(Code.NOT_FOUND, f"No message {parent_message_id} is visible to this key.")
        if asked.thread_id and parent.thread_ref != asked.thread_id:
            raise invalid("/thread_id", f"message {parent.id} is in thread {parent.thread_ref}, not this one")
        if asked.expected_context_version or asked.expected_last_message_id:
            thread = thread or await store.thread_context(conn, principal.project_id, parent.thread_ref)
            assert thread is not None  # the parent is in it
            check_reply_context(thread, asked.expected_context_version, asked.expected_last_message_id)
    return parent


def _from_address(env: Env, parent: store.Message | None) -> str:
    # A reply goes out from the address the inbound mail was sent to.
    if parent is not None and parent.direction == "inbound" and parent.to:
        return parent.to[0]
    if parent is not None and parent.direction == "outbound":
        return parent.from_address
    return env.settings.from_address


def _status(review: Review) -> str:
    """The contract's two statuses: released to delivery (``sent``: the review's state and delivery
    say how far it got) or waiting for a reviewer."""
    if review.send_path is not None:
        return "sent"
    return "queued_for_review"
