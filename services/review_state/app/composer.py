"""The composing agent's mutations: cancel, redraft, restamp, and the chat it shares with humans."""

from __future__ import annotations

import asyncio

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import new_id
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal

from review_state import store
from review_state.app import _kernel
from review_state.app._events import Facts
from review_state.app._gates import born_stale, check_token, contacts_allow, deadline_minutes
from review_state.app.env import Env
from review_state.domain.decision import FORCED_PAST_DEADLINE, review_deadline
from review_state.domain.machine import Verb
from review_state.domain.review import Review, Turn
from review_state.domain.revision import Revision
from review_state.domain.submission import CHAT_MAX, check_intent, validate_draft

CHAT_RETRIES = 3  # chat is not a CAS verb: a lost race is retried, not reported


async def cancel(
    env: Env, principal: Principal, review_id: str, parent_revision: int, idempotency_key: str
) -> Review:
    """Withdraw a review (from `failed`, the one close-out). Emits the terminal ``cancelled`` nudge."""
    fields = {"verb": "cancel", "review_id": review_id, "parent_revision": parent_revision}

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        facts = Facts(cancelled_by=principal.actor_kind.value)
        edge = await _kernel.transition(uow, principal, review_id, Verb.CANCEL, parent_revision, facts=facts)
        return edge.after, ""

    async def run() -> Review:
        return (await _kernel.once(env.db, principal, idempotency_key, fields, act))[0]

    return await _kernel.guard(env.db, principal, review_id, parent_revision, run)


async def _token_high_water(env: Env, principal: Principal, review: Review, token: str) -> int | None:
    return await check_token(env, principal, token, review.category_id) if token else None


async def _composed_under(env: Env, principal: Principal, review: Review, token: str) -> int:
    """The rule high-water a redraft was composed under. Without a token it fails closed: if the
    review's stack (its category's rules, the house style, the agent's own rules) moved past the
    high-water the review was composed under, the redraft is ``409 born_stale`` like a stale token."""
    if token:
        return await check_token(env, principal, token, review.category_id)
    current = await env.peers.stack_high_water(principal, review.category_id)
    if current > review.rule_high_water:
        raise born_stale(review.rule_high_water, current, "sent no composition_token")
    return review.rule_high_water


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
        replay = await _kernel.replayed(env.db, principal, idempotency_key, fields)
        if replay is not None:
            return replay[0]
        current = await _kernel.precheck(env.db, principal, review_id, Verb.SUBMIT_REVISION, parent_revision)
        draft = revision.apply(current)
        validate_draft(draft)
        if revision.intent is not None:
            check_intent(revision.intent)
        if revision.confidence is not None and not 0.0 <= revision.confidence <= 1.0:
            raise invalid("/confidence", "must be between 0 and 1")
        await contacts_allow(env, principal.project_id, [*draft.to, *draft.cc, *draft.bcc])
        high_water, minutes = await asyncio.gather(
            _composed_under(env, principal, current, composition_token),
            deadline_minutes(env, principal, current.category_id),
        )

        async def act(uow: UnitOfWork) -> tuple[Review, str]:
            before = await _kernel.load(uow.conn, principal, review_id)
            # The new revision gets a review agent's full window from now (a deadline that forced
            # the old revision to a human is spent with it).
            forced = before.gate_outcome == FORCED_PAST_DEADLINE
            edge = await _kernel.move(
                uow,
                before,
                Verb.SUBMIT_REVISION,
                _kernel.actor_of(principal, before),
                parent_revision=parent_revision,
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
                rule_high_water=high_water,
                review_deadline=review_deadline(utcnow(), minutes),
                gate_outcome=None if forced else before.gate_outcome,
            )
            await _kernel.add_turn(uow, edge.after, principal, "revision", "")
            return edge.after, ""

        return (await _kernel.once(env.db, principal, idempotency_key, fields, act))[0]

    return await _kernel.guard(env.db, principal, review_id, parent_revision, run)


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
        replay = await _kernel.replayed(env.db, principal, idempotency_key, fields)
        if replay is not None:
            return replay[0]
        current = await _kernel.precheck(env.db, principal, review_id, Verb.RESTAMP, parent_revision)
        high_water = await _token_high_water(env, principal, current, composition_token)

        async def act(uow: UnitOfWork) -> tuple[Review, str]:
            before = await _kernel.load(uow.conn, principal, review_id)
            edge = await _kernel.move(
                uow,
                before,
                Verb.RESTAMP,
                _kernel.actor_of(principal, before),
                parent_revision=parent_revision,
                rule_high_water=before.rule_high_water if high_water is None else high_water,
            )
            await _kernel.add_turn(uow, edge.after, principal, "restamp", "")
            return edge.after, ""

        return (await _kernel.once(env.db, principal, idempotency_key, fields, act))[0]

    return await _kernel.guard(env.db, principal, review_id, parent_revision, run)


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
        turn_id = new_id("turn")
        edge = await _kernel.transition(
            uow, principal, review_id, Verb.POST_CHAT, None, facts=Facts(said=text, turn_id=turn_id)
        )
        human = principal.actor_kind in (ActorKind.HUMAN, ActorKind.ADMIN)
        turn_type = "human_comment" if human else "agent_question"
        turn = await _kernel.add_turn(uow, edge.after, principal, turn_type, text, turn_id=turn_id)
        return edge.after, turn.id

    async def run() -> tuple[Review, Turn]:
        for attempt in range(CHAT_RETRIES):
            try:
                review, turn_id, _ = await _kernel.once(env.db, principal, idempotency_key, fields, act)
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
        current = await _kernel.load(conn, principal, review_id)
    return await _kernel.guard(env.db, principal, review_id, current.revision, run)
