"""``submit``: a send, reply or forward becomes a review, and the resolved review policy decides
whether it is queued for a reviewer, released directly, or auto-sent (spec 000 "Where a review comes
from")."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field

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
from review_state.domain.review import Review, Turn
from review_state.domain.submission import (
    HUMANS_NOTIFIED,
    Asked,
    Draft,
    Route,
    Threading,
    check_reply_context,
    materialize,
    resolve_policy,
    route_for,
    validate_draft,
)
from review_state.domain.submitted import Composed, released, submitted


async def submit(env: Env, principal: Principal, request: SubmitRequest) -> tuple[str, Review]:
    """Create a review for a send, reply or forward; the resolved review policy decides what happens.

    Order (spec 000): shape, then the reply's thread (one that moved since the agent read it is
    ``409 reply_context_changed``), then blocks / suppression / quota, then the intent gate; nothing is
    stored for a refusal. Returns (status, review): ``queued_for_review`` or ``sent``. Its phases, in
    order: ``_precheck`` (the key's replay and the draft's own checks), ``_gates`` (the peer calls),
    one unit of work (``_Unit``: the review ``domain.submitted`` makes), then its delivery."""
    request.check(principal)
    fields = request.fields()
    checked = await _precheck(env, principal, request, fields)
    if isinstance(checked, Review):  # a retry of a submit that ran: the review as it now is
        review = await deliver(env, checked)
        return _status(review), review
    unit = await _gates(env, principal, request, checked)
    review_id = unit.composed.review_id
    try:
        review, _, replayed = await _kernel.once(
            env.db, principal, request.idempotency_key, fields, unit, checked=True
        )
    except BaseException:
        if unit.pooled:
            await refund_uncommitted(env, principal, review_id)
        raise
    if unit.pooled and review.id != review_id:  # an Idempotency-Key twin committed first: ours never will
        await refund_uncommitted(env, principal, review_id)
    # A replay drives a delivery its first call left unfinished, claiming it as any worker does.
    review = await deliver(env, review, None if replayed or not unit.claims else unit.claims[-1])
    return _status(review), review


@dataclass(frozen=True)
class SubmitRequest:
    """A send, reply or forward as its agent sent it (``submit``): the draft, what it answers, and what
    it asks beyond the draft (``Asked``), with its Idempotency-Key and composition token."""

    kind: str
    draft: Draft
    category_id: str
    idempotency_key: str
    parent_message_id: str = ""
    confidence: float | None = None
    composition_token: str = ""
    asked: Asked | None = None

    def check(self, principal: Principal) -> None:
        if principal.actor_kind is not ActorKind.AGENT:
            raise DomainError(Code.FORBIDDEN_SCOPE, "Only an agent key composes outbound messages.")
        if self.confidence is not None and not 0.0 <= self.confidence <= 1.0:
            raise invalid("/confidence", "must be between 0 and 1")
        self.wants.validate()

    @property
    def wants(self) -> Asked:
        return self.asked or Asked()

    def fields(self) -> dict[str, object]:
        """What the Idempotency-Key's request hash is taken over."""
        return {
            "verb": "submit",
            "kind": self.kind,
            "parent": self.parent_message_id,
            "draft": self.draft.fingerprint(),
            "category_id": self.category_id,
            "confidence": self.confidence,
            "token": self.composition_token,
            # Keys stored before a field of ``Asked`` was added still match: a default is left out.
            **({"asked": _asked_fields(self.wants)} if self.wants != Asked() else {}),
        }


@dataclass(frozen=True)
class _Checked:
    """What the precheck found of a submit that has not run: the materialized draft, how it threads,
    the message it answers, its From address and its recipients' facts."""

    draft: Draft
    threading: Threading
    parent: store.Message | None
    from_address: str
    facts: store.SendingFacts


async def _precheck(
    env: Env, principal: Principal, request: SubmitRequest, fields: dict[str, object]
) -> Review | _Checked:
    """The Idempotency-Key's replay (the review it made), else the draft materialized and checked.
    The replay check and the contacts' facts share one connection (a pool checkout costs more than
    either read); a replay or a refused draft reads nothing more. A keyed send knows its recipients
    before any read (its draft's own): its key and their facts are one statement."""
    kind, asked = request.kind, request.wants
    async with env.db.single_statement.connect() as conn:
        facts = None
        if kind == "send" and request.idempotency_key:
            key = (principal.actor_id, request.idempotency_key)
            facts = await sending_facts(
                conn, principal.project_id, request.draft.recipients, principal.org_id, key
            )
            replay = await _kernel.replay_of(conn, principal, facts.remembered, fields)
        else:
            replay = await _kernel.replayed(conn, principal, request.idempotency_key, fields)
        if replay is not None:
            return replay[0]
        parent = await _parent(env, principal, kind, request.parent_message_id, asked)
        from_address = asked.inbox or _from_address(env, parent)
        draft, threading = materialize(
            kind,
            request.draft,
            parent.as_parent() if parent else None,
            reply_all=asked.reply_all,
            inbox=from_address,
        )
        validate_draft(draft)
        if facts is None:
            facts = await sending_facts(conn, principal.project_id, draft.recipients, principal.org_id)
    return _Checked(draft, threading, parent, from_address, facts)


async def _gates(env: Env, principal: Principal, request: SubmitRequest, checked: _Checked) -> _Unit:
    """The peer calls: the contacts' and the policy's verdicts, the rule snapshot, the review agent's
    deadline, the auto-send gate and the shared sending pool. Returns the unit of work they allow."""
    check_contacts(env, checked.facts)
    policy, source = resolve_policy(checked.facts.policy, checked.facts.account_policy)
    route = route_for(policy, checked.draft.intent, source, request.wants.mode)
    if not request.composition_token and checked.facts.require_composition_token:
        raise token_required(request.kind)
    generation = env.stacks.generation
    high_water = (
        check_token(env, principal, request.composition_token, request.category_id)
        if request.composition_token
        else _stack_high_water(env, principal, request.category_id)
    )
    rule_high_water, minutes = await asyncio.gather(
        high_water, deadline_minutes(env, principal, "" if route is Route.DIRECT else request.category_id)
    )
    review_id = new_id("rr")
    hold: str | None = None
    rung, cap = "", 0
    if route is Route.AUTO_CANDIDATE:
        hold, rung, cap = await auto_send_gate(
            env, principal, review_id, request.category_id, request.confidence, checked.facts.first_contact
        )
    # The shared-pool governor: a release no human reviewed spends a unit of its From domain's
    # deployment-wide budget before its unit of work; a held or uncommitted release gives it back.
    pooled = False
    if released(route, hold):
        spent = await env.peers.consume_pool_send(principal, checked.from_address, review_id)
        if spent.allowed:
            pooled = True
        elif route is Route.DIRECT:
            raise pool_spent(spent)
        else:
            hold = "pool_budget"  # queued for a human, as every other gate holds
    composed = Composed(
        review_id=review_id,
        org_id=principal.org_id,
        project_id=principal.project_id,
        agent_id=principal.actor_id,
        category_id=request.category_id,
        kind=request.kind,
        draft=checked.draft,
        threading=checked.threading,
        from_address=checked.from_address,
        parent_id=checked.parent.id if checked.parent else None,
        confidence=request.confidence,
        token_named=bool(request.composition_token),
        mode=request.wants.mode,
        route=route,
        hold=hold,
        rung=rung,
        deadline_minutes=minutes,
    )
    return _Unit(env, principal, request, composed, cap, pooled, generation, rule_high_water)


@dataclass
class _Unit:
    """A submit's unit of work: it writes the review ``domain.submitted`` makes, and records the
    delivery of a release. Run again on a retry of the unit, it keeps what the earlier run read."""

    env: Env
    principal: Principal
    request: SubmitRequest
    composed: Composed
    cap: int  # the daily auto-send cap an auto-send spends in the unit
    pooled: bool  # it spent a unit of the shared sending pool
    generation: int  # of the rule stacks its high-water was read at
    rule_high_water: int
    claims: list[Claim] = field(default_factory=list)  # the lease of the attempt each run recorded

    async def __call__(self, uow: UnitOfWork) -> tuple[Review, str]:
        env, principal, request, composed = self.env, self.principal, self.request, self.composed
        thread_ref = composed.threading.thread_ref
        if request.kind == "reply" and thread_ref and not request.wants.second_reply:
            # Read in the unit that writes the reply, writers of the thread serialized (store.pending_reply).
            await _no_reply_pending(uow, principal, thread_ref)
        if not request.composition_token and self.generation != env.stacks.generation:
            self.generation = env.stacks.generation  # a rule moved since the stack was read: read it again
            self.rule_high_water = await _stack_high_water(env, principal, request.category_id)
        now = utcnow()
        held = composed.hold
        if (
            composed.route is Route.AUTO_CANDIDATE
            and held is None
            and not await spend_cap(uow, principal.project_id, request.category_id, self.cap)
        ):
            held = "daily_cap"  # spent in this unit: a twin or a failed insert spends nothing
        new = submitted(composed, now, held, self.rule_high_water)
        review = new.review
        store.add_review(uow, review)
        if new.send_path is not None:
            await uow.flush()  # the release writes the review's turn and delivery against its row
        elif self.pooled:  # held by the daily cap in this unit: the unit comes back with it
            publish_pool_settled(uow, review, NOT_SENT)
        if new.notify_humans:
            await _notify_humans(uow, review)
        if new.send_path is not None:
            review, claim = await start_delivery(uow, review, new.send_path, now, env.settings.delivery_lease)
            self.claims.append(claim)
        return review, ""


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
