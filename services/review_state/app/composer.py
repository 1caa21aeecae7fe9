"""The composing agent's mutations: cancel, redraft, restamp, and the chat it shares with humans."""

from __future__ import annotations

import asyncio

from reviewloop.errors import Code, DomainError, FieldViolation, invalid
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal

from review_state import store
from review_state.app import _kernel
from review_state.app._gates import born_stale, check_token, contacts_allow, deadline_minutes
from review_state.app.env import Env
from review_state.domain.machine import Verb
from review_state.domain.review import Facts, Move, Review, Turn
from review_state.domain.revision import (
    Redraft,
    Restamp,
    RestampRequest,
    SubmitRevisionRequest,
    redraft_move,
    restamp_move,
)
from review_state.domain.submission import CHAT_MAX, check_intent, validate_draft

CHAT_RETRIES = 3  # chat is not a CAS verb: a lost race is retried, not reported


async def cancel(
    env: Env, principal: Principal, review_id: str, parent_revision: int, idempotency_key: str
) -> Review:
    """Withdraw a review (from `failed`, the one close-out). Emits the terminal ``cancelled`` nudge."""
    fields = {"verb": "cancel", "review_id": review_id, "parent_revision": parent_revision}

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        facts = Facts(cancelled_by=principal.actor_kind.value)
        edge = await _kernel.transition(
            uow,
            principal,
            review_id,
            Move(Verb.CANCEL, parent_revision=parent_revision, facts=facts),
            key=idempotency_key,
            fields=fields,
        )
        return edge.after, ""

    async def run() -> Review:
        return (await _kernel.once(env.db, principal, idempotency_key, fields, act, checked=True))[0]

    return await _kernel.guard(env.db, principal, review_id, parent_revision, run)


async def _composed_under(
    env: Env, principal: Principal, review: Review, token: str, rules_version_seen: int | None
) -> int:
    """The rule high-water a redraft was composed under: its token's, or the SDK's ``rules_version_seen``
    (checked the same way: below the stack's high-water is ``409 born_stale``). Without either it fails
    closed: if the review's stack (its category's rules, the house style, the agent's own rules) moved
    past the high-water the review was composed under, the redraft is ``409 born_stale`` too."""
    high_water = await check_token(env, principal, token, review.category_id) if token else None
    if high_water is not None and rules_version_seen is None:
        return high_water
    current = await env.peers.stack_high_water(principal, review.category_id)
    if rules_version_seen is None:
        if current > review.rule_high_water:
            raise born_stale(review.rule_high_water, current, "sent no composition_token")
        return review.rule_high_water
    if rules_version_seen > current:
        raise invalid(
            "/rules_version_seen",
            f"is above the stack's rule high-water {current}; send the rule_high_water get_rules reported",
        )
    if rules_version_seen < current:
        raise born_stale(rules_version_seen, current, "named it as rules_version_seen")
    return rules_version_seen if high_water is None else high_water


async def submit_revision(env: Env, principal: Principal, asked: SubmitRevisionRequest) -> Review:
    """A redraft from needs_review, chatting or rejected: bumps ``revision`` and returns to needs_review.
    ``expected_version`` (the SDK's ``version``) is a second compare-and-set, on the row's version.
    ``recheck_through_seq`` raises the recheck watermark as a restamp's does (a redraft is always composed
    under the rules in force, or refused)."""
    _check_recheck_seq(asked.recheck_through_seq)
    fields = {
        "verb": "submit_revision",
        "review_id": asked.review_id,
        "parent_revision": asked.parent_revision,
        "revision": asked.revision.fingerprint(),
        "token": asked.composition_token,
        "expected_version": asked.expected_version,
        "rules_version_seen": asked.rules_version_seen,
        "recheck_through_seq": asked.recheck_through_seq,
    }
    request = _kernel.Request(
        Verb.SUBMIT_REVISION,
        asked.review_id,
        asked.parent_revision,
        asked.expected_version,
        asked.idempotency_key,
        fields,
    )

    async def peers(current: Review) -> Redraft:
        draft = asked.revision.apply(current)
        validate_draft(draft)
        if asked.revision.intent is not None:
            check_intent(asked.revision.intent)
        if asked.revision.confidence is not None and not 0.0 <= asked.revision.confidence <= 1.0:
            raise invalid("/confidence", "must be between 0 and 1")
        await contacts_allow(env, principal.project_id, draft.recipients)
        high_water, minutes = await asyncio.gather(
            _composed_under(env, principal, current, asked.composition_token, asked.rules_version_seen),
            deadline_minutes(env, principal, current.category_id),
        )
        named = bool(asked.composition_token) or asked.rules_version_seen is not None
        return Redraft(
            asked.parent_revision,
            asked.expected_version,
            draft,
            asked.revision.confidence,
            high_water,
            named,
            asked.recheck_through_seq,
            minutes,
        )

    def step(before: Review, redraft: Redraft) -> Move:
        return redraft_move(before, redraft, utcnow(), _kernel.turn(principal, "revision", ""))

    return await _kernel.mutate(env.db, principal, request, _kernel.Phases(peers, step))


async def restamp(env: Env, principal: Principal, asked: RestampRequest) -> Review:
    """The honest "I re-read the rules and nothing needed to change": no new revision; records the rule
    high-water the agent re-read (its token's, or the stack's when the SDK's ``against_version`` and
    ``house_style_version`` name the versions in force) so the draft stops counting as born stale. A
    restamp that names neither is a 422 naming both fields: it would record nothing.
    ``expected_version`` is a second compare-and-set, on the row's version.

    ``recheck_through_seq`` (the SDK's): the agent re-checked the draft against the review's nudges
    through that seq. It raises the review's ``recheck_completed_through_seq`` (never lowers it), and only
    under the rules in force: a draft left behind them is ``409 born_stale``, nothing recorded. That the
    seq is one the review has is the caller's check (the nudge service numbers them)."""
    _check_recheck_seq(asked.recheck_through_seq)
    if not asked.composition_token and asked.against_version is None:
        raise _names_no_snapshot()
    fields = {
        "verb": "restamp",
        "review_id": asked.review_id,
        "parent_revision": asked.parent_revision,
        "token": asked.composition_token,
        "expected_version": asked.expected_version,
        "against_version": asked.against_version,
        "house_style_version": asked.house_style_version,
        "recheck_through_seq": asked.recheck_through_seq,
    }
    request = _kernel.Request(
        Verb.RESTAMP,
        asked.review_id,
        asked.parent_revision,
        asked.expected_version,
        asked.idempotency_key,
        fields,
    )

    async def peers(current: Review) -> Restamp:
        if asked.composition_token:
            high_water = await check_token(env, principal, asked.composition_token, current.category_id)
        else:
            assert asked.against_version is not None  # a restamp names one or the other
            high_water = await _reread(
                env, principal, current, asked.against_version, asked.house_style_version
            )
        return Restamp(asked.parent_revision, asked.expected_version, high_water, asked.recheck_through_seq)

    def step(before: Review, restamped: Restamp) -> Move:
        return restamp_move(before, restamped, _kernel.turn(principal, "restamp", ""))

    return await _kernel.mutate(env.db, principal, request, _kernel.Phases(peers, step))


RESTAMP_SNAPSHOT = ("/composition_token", "/against_version")


def _names_no_snapshot() -> DomainError:
    """A restamp says "I re-read the rules and nothing needed to change", so it names the rules it re-read;
    one that names none would record nothing, leave the draft held stale and the human's approve a
    ``409 born_stale`` (issue 34). The problem names both ways to say it."""
    how = (
        "name the rule snapshot you re-read: the composition_token of the get_rules you re-applied, or the "
        "versions it reported (against_version: category_rules_version, and house_style_version)"
    )
    return DomainError(
        Code.BAD_REQUEST,
        f"restamp_review {how}.",
        violations=tuple(FieldViolation(pointer, how) for pointer in RESTAMP_SNAPSHOT),
    )


def _check_recheck_seq(seq: int | None) -> None:
    if seq is not None and seq < 1:
        raise invalid("/recheck_through_seq", "must be a nudge seq of the review (1 or more)")


async def _reread(
    env: Env, principal: Principal, review: Review, against_version: int, house_style_version: int | None
) -> int:
    """The stack's high-water, when the versions the agent re-read (the SDK's restamp inputs) are the ones
    in force. A version above them is a 422; one below them is ``409 born_stale``, like a stale token:
    the rules moved since, so nothing is stamped. Our drafts carry one high-water for the whole stack,
    so an omitted ``house_style_version`` is read as the one ``get_rules`` reported with it."""
    now = await env.peers.stack_versions(principal, review.category_id)
    named = [("/against_version", against_version, now.category_rules_version)]
    if house_style_version is not None:
        named.append(("/house_style_version", house_style_version, now.house_style_version))
    for pointer, seen, current in named:
        if seen > current:
            raise invalid(pointer, f"is above the current version {current}; send what get_rules reported")
    for pointer, seen, current in named:
        if seen < current:
            raise born_stale(
                review.rule_high_water, now.rule_high_water, f"re-read {pointer[1:]} {seen} of {current}"
            )
    return now.rule_high_water


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
        human = principal.actor_kind in (ActorKind.HUMAN, ActorKind.ADMIN)
        turn = _kernel.turn(principal, "human_comment" if human else "agent_question", text)
        edge = await _kernel.transition(
            uow,
            principal,
            review_id,
            Move(Verb.POST_CHAT, parent_revision=None, facts=Facts(said=text, turn_id=turn.id), turn=turn),
            key=idempotency_key,
            fields=fields,
        )
        return edge.after, turn.id

    async def run() -> tuple[Review, Turn]:
        for attempt in range(CHAT_RETRIES):
            try:
                review, turn_id, _ = await _kernel.once(
                    env.db, principal, idempotency_key, fields, act, checked=True
                )
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
