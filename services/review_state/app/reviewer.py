"""The reviewer planes: a human opens and decides a draft; a linked review agent decides one within
the round budget dispatch_budget admits, and its circuit breakers may return the draft to a human."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError, http_status, invalid
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal

from review_state.app import _events, _kernel
from review_state.app._events import Facts
from review_state.app._gates import reviewer_breaker
from review_state.app.delivery import deliver, start_delivery
from review_state.app.env import Env
from review_state.clients import DiffResult
from review_state.domain.decision import Decision, changed, decision_changes, diffable
from review_state.domain.feedback import DecisionTurn, decision_of
from review_state.domain.machine import Actor, State, Verb, allowed_actions
from review_state.domain.review import Review

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReviewerResult:
    kind: str  # sent | sent_to_human | queued | failed
    review: Review
    forced_by_breaker: str = ""


async def open_review(
    env: Env, principal: Principal, review_id: str, revision: int, version: int, idempotency_key: str = ""
) -> Review:
    """A human picks a draft up: needs_review -> in_review, with the (revision, version) CAS."""
    fields = {"verb": "open", "review_id": review_id, "revision": revision, "version": version}

    async def act(uow: UnitOfWork) -> tuple[Review, str]:
        edge = await _kernel.transition(
            uow, principal, review_id, Verb.OPEN, revision, expected_version=version
        )
        await _kernel.add_turn(uow, edge.after, principal, "opened", "")
        return edge.after, ""

    async def run() -> Review:
        return (await _kernel.once(env.db, principal, idempotency_key, fields, act))[0]

    return await _kernel.guard(env.db, principal, review_id, revision, run)


async def decide(
    env: Env, principal: Principal, review_id: str, decision: Decision, idempotency_key: str = ""
) -> Review:
    """A human decides approve | edit | reject | escalate with the (revision, version) CAS."""
    if principal.actor_kind not in (ActorKind.HUMAN, ActorKind.ADMIN):
        raise DomainError(Code.FORBIDDEN_SCOPE, "Decisions on this plane take a human key.")

    async def run() -> Review:
        return (await _decide(env, principal, review_id, decision, idempotency_key, Actor.HUMAN))[0]

    return await _kernel.guard(env.db, principal, review_id, decision.revision, run)


async def reviewer_decide(
    env: Env, principal: Principal, review_id: str, decision: Decision, idempotency_key: str = ""
) -> ReviewerResult:
    """A linked review agent decides a pending draft; a tripped breaker returns it to the human."""
    if principal.actor_kind is not ActorKind.REVIEW_AGENT:
        raise DomainError(Code.FORBIDDEN_SCOPE, "The reviewer plane takes a review_agent key.")
    if decision.new_rule:
        raise invalid("/new_rule", "only a human attaches a new rule to a decision")

    async def run() -> tuple[Review, str]:
        return await _decide(env, principal, review_id, decision, idempotency_key, Actor.REVIEW_AGENT)

    review, forced = await _kernel.guard(env.db, principal, review_id, decision.revision, run)
    return ReviewerResult(_reviewer_kind(review, forced), review, forced)


def _reviewer_kind(review: Review, forced: str) -> str:
    """``sent`` only for a delivered message; a release whose delivery is still going (or parked)
    is ``queued``, one the provider refused ``failed``."""
    if forced or review.send_path is None:
        return "sent_to_human"
    return {State.SENT: "sent", State.FAILED: "failed"}.get(review.state, "queued")


async def _decide(
    env: Env, principal: Principal, review_id: str, decision: Decision, idempotency_key: str, actor: Actor
) -> tuple[Review, str]:
    verb = decision.verb()
    fields = {"verb": f"decide:{actor}", "review_id": review_id, **decision.__dict__}
    replay = await _kernel.replayed(env.db, principal, idempotency_key, fields)
    if replay is not None:
        return await deliver(env, replay[0]), ""
    current = await _kernel.precheck(env.db, principal, review_id, verb, decision.revision, decision.version)
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
            hold = await reviewer_breaker(env, principal, current)
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


async def _edit_diff(
    env: Env, principal: Principal, current: Review, decision: Decision
) -> tuple[dict[str, str], DiffResult]:
    """The edit's new fields and its diff from the diff service (stored on the decision turn)."""
    edited = decision.edited(current)
    try:
        diff = await env.peers.compute_diff(
            principal,
            current.id,
            current.revision,
            current.revision + 1,
            diffable(current),
            {**diffable(current), **edited},
        )
    except DomainError as error:
        if error.code is not Code.CONFLICT:
            raise
        # Another edit of this revision already stored its diff: that edit won the draft.
        async with env.db.engine.connect() as conn:
            now = await _kernel.load(conn, principal, current.id)
        raise DomainError(
            Code.STALE,
            "Another reviewer edited this revision first; re-read the review and decide on the current one.",
            state=now.state,
            revision=now.revision,
            version=now.version,
            allowed_actions=allowed_actions(now.state, _kernel.actor_of(principal, now)),
        ) from None
    return edited, diff


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
    edited: dict[str, str] | None = None
    diff: DiffResult | None = None
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
        before = await _kernel.load(uow.conn, principal, review_id)
        edge = await _kernel.move(
            uow,
            before,
            verb,
            _kernel.actor_of(principal, before),
            parent_revision=decision.revision,
            expected_version=decision.version,
            facts=Facts(said=decision.feedback),
            **decision_changes(verb, before, edited, now),
            # Each review-agent round is a hop, counted here for the reader; dispatch_budget bounds them.
            reviewer_hops=before.reviewer_hops + (actor is Actor.REVIEW_AGENT),
        )
        after = edge.after
        did_change = changed(edited, before)
        await _kernel.add_turn(
            uow,
            after,
            principal,
            "decision",
            decision.feedback,
            action=decision.action,
            changed=did_change,
            diff_json=orjson.loads(diff.diff_json) if diff is not None and diff.diff_json else None,
            diff_unified=diff.diff_unified if diff is not None else None,
            rule_ids=rule_ids,
        )
        _events.publish_outcome(uow, after, decision_of([DecisionTurn(decision.action, did_change)]))
        if after.state is State.APPROVED:
            path = "human_reviewed" if actor is Actor.HUMAN else "reviewer_approved"
            after = await start_delivery(uow, after, path, now)
        return after, ""

    review, _, _ = await _kernel.once(env.db, principal, idempotency_key, fields, act)
    return await deliver(env, review)  # a replay drives a delivery its first call left unfinished


async def _hold(
    uow: UnitOfWork, principal: Principal, review_id: str, decision: Decision, breaker_name: str
) -> tuple[Review, str]:
    """A circuit breaker overrode a review agent's release: the draft stays in the human queue."""
    before = await _kernel.load(uow.conn, principal, review_id)
    edge = await _kernel.move(
        uow,
        before,
        Verb.HOLD,
        Actor.SYSTEM,
        parent_revision=decision.revision,
        expected_version=decision.version,
        facts=Facts(breaker=breaker_name),
        gate_outcome=f"held:{breaker_name}",
        reviewer_hops=before.reviewer_hops + 1,
    )
    await _kernel.add_turn(uow, edge.after, principal, "breaker", decision.feedback, action=decision.action)
    return edge.after, breaker_name
