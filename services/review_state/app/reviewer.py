"""The reviewer planes: a human opens and decides a draft; a linked review agent decides one within
the round budget dispatch_budget admits, and its circuit breakers may return the draft to a human."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError, http_status, invalid
from reviewloop.ids import new_id
from reviewloop.rules.v1.rules_pb2 import SaveRuleRequest
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal

from review_state import store
from review_state.app import _events, _kernel
from review_state.app._gates import refund_uncommitted, reviewer_breaker, spend_cap
from review_state.app.delivery import Claim, deliver, record_attempt, send_columns
from review_state.app.env import Env
from review_state.app.preview import check_seen
from review_state.app.undo import hold_release, release_later
from review_state.clients import DiffResult
from review_state.domain.decision import (
    FORCED_PAST_DEADLINE,
    POOL_BUDGET,
    QUORUM_REQUIRED,
    REVIEW_DEADLINE_PASSED,
    Ballot,
    Decision,
    changed,
    deadline_passed,
    decision_move,
    diffable,
    turn_body,
)
from review_state.domain.escalation import Escalation
from review_state.domain.feedback import approvers, decision_of, decisions_of, panel
from review_state.domain.machine import Actor, State, Verb
from review_state.domain.review import Edge, Facts, Move, Review, Turn
from review_state.domain.submission import Dial
from review_state.domain.undo import release_at

log = logging.getLogger(__name__)

# Why a review agent's round was not admitted (``forced_by_breaker``): the draft goes to a human.
MAX_HOPS = "max_hops_reached"
NO_VERDICT_CAP = "no_verdict_cap_reached"


SYSTEM_ACTOR = "review_state"  # the actor of the platform's own turns


@dataclass(frozen=True)
class Quorum:
    """A category's quorum (the risk dial's review settings): distinct approvals of the current
    revision a release needs, and whether a review agent's counts as one."""

    approvals: int = 1
    review_agent_counts: bool = False
    panel: int = 0  # at most this many distinct humans decide the draft (0: any number)

    @classmethod
    def of(cls, dial: Dial) -> Quorum:
        return cls(dial.quorum_approvals, dial.quorum_review_agent, dial.quorum_panel)


@dataclass(frozen=True)
class Gates:
    """What a decision's checks before its unit found: the breaker that holds a review agent's release
    (None: none), the daily auto-send cap its unit spends (None: none), the category's quorum, and
    whether the precheck read the draft as held stale (when it did not, the decision's
    compare-and-set checks it still is not)."""

    hold: str | None = None
    cap: int | None = None
    quorum: Quorum = Quorum()
    stale: bool = True


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

    async def run() -> Review:
        # Its read (with the key) on a connection of its own, then a unit of work that is one statement
        # on PostgreSQL (the compare-and-set, the turn, the nudge and the key) in autocommit.
        current, replayed, _ = await _kernel.precheck(
            env.db, principal, review_id, Verb.OPEN, revision, version, key=idempotency_key, fields=fields
        )
        if replayed is not None:
            return current

        async def act(uow: UnitOfWork) -> tuple[Review, str]:
            edge = await _kernel.move(
                uow,
                current,
                _kernel.actor_of(principal, current),
                Move(
                    Verb.OPEN,
                    parent_revision=revision,
                    expected_version=version,
                    turn=_kernel.turn(principal, "opened", ""),
                ),
                store.Cas(last=True),
            )
            return edge.after, ""

        return (await _kernel.once(env.db, principal, idempotency_key, fields, act, checked=True))[0]

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
    """A decision's phases: the precheck (the table's verdict and the key's replay), the decider's own
    checks, the peer calls that admit it (``_admit``), then its unit of work (``_apply_decision``)."""
    verb = decision.verb()
    if decision.escalation is not None:
        decision.escalation.check(utcnow())
    fields = {"verb": f"decide:{actor}", "review_id": review_id, **decision.__dict__}
    try:
        current, replayed, stale = await _kernel.precheck(
            env.db,
            principal,
            review_id,
            verb,
            decision.revision,
            decision.version or None,  # 0: the caller named no version; the revision guards alone
            key=idempotency_key,
            fields=fields,
        )
    except DomainError as error:
        counted = await _counted(env, principal, review_id, decision) if error.code is Code.STALE else None
        if counted is None:
            raise
        return counted, ""
    if replayed is not None:
        # The review as it now is (a replay drives a delivery its first call left unfinished), and the
        # breaker that held the first call.
        return await deliver(env, current), replayed
    # The fingerprint (``fields``) holds what the caller sent: a retry without a version is the same
    # request. Its compare-and-set is on the version this call read.
    decision = replace(decision, version=decision.version or current.version)
    if actor is Actor.HUMAN:
        check_seen(current, decision, verb)
    if actor is Actor.REVIEW_AGENT and deadline_passed(current, utcnow()):
        # Too late for a review agent: the draft is the human's, whatever it decided; no round is spent.
        return await _force_past_deadline(env, current), REVIEW_DEADLINE_PASSED
    admitted = await _admit(env, principal, current, decision, actor, stale)
    try:
        review, held_by = await _apply_decision(
            env, principal, current, decision, actor, admitted.gates, fields, idempotency_key
        )
    except BaseException as error:
        if admitted.pooled:
            await refund_uncommitted(env, principal, review_id)
        if isinstance(error, DomainError) and admitted.receipt is not None and http_status(error.code) == 409:
            # A concurrent writer won after admission: the round ends without a verdict. Any other
            # failure (a peer down) leaves the receipt open, so retrying this decision reattaches to it.
            await _settle_round(env, principal, admitted.receipt, no_verdict_reason="superseded")
        raise
    if (
        admitted.pooled and review.send_path != "reviewer_approved"
    ):  # held in its unit (the daily cap, a quorum)
        await refund_uncommitted(env, principal, review_id)
    if admitted.receipt is not None:
        verdict = "pass" if verb is Verb.APPROVE else "issues"
        await _settle_round(env, principal, admitted.receipt, verdict=verdict)
    return review, held_by


@dataclass(frozen=True)
class _Admitted:
    """What a decision's peer calls found: its ``Gates``, the receipt of a review agent's admitted
    round (None: not one), and whether its release spent a unit of the shared sending pool."""

    gates: Gates
    receipt: str | None = None
    pooled: bool = False


async def _admit(
    env: Env, principal: Principal, current: Review, decision: Decision, actor: Actor, stale: bool
) -> _Admitted:
    """The peer calls before a decision's unit: a human's category quorum (the panel bounds every human
    verb); a review agent's round, its breakers and the shared sending pool its release spends."""
    verb = decision.verb()
    hold: str | None = None
    receipt: str | None = None
    cap: int | None = None  # the daily auto-send cap a review agent's release spends in its unit
    quorum = Quorum()
    if actor is Actor.HUMAN and current.category_id:
        quorum = Quorum.of(await env.peers.get_dial(principal, current.category_id))
    if actor is Actor.REVIEW_AGENT:
        # Every review-agent round is admitted by dispatch_budget before it acts; a spent budget is
        # the hop limit, and the draft goes to a human whatever the reviewer decided.
        try:
            receipt = await env.peers.admit_reviewer_round(
                principal,
                current.id,
                f"{current.id}:{decision.revision}:{decision.version}",
                first_round=current.reviewer_hops == 0,
            )
        except DomainError as error:
            if error.code is not Code.QUOTA_EXCEEDED:
                raise
            hold = _refused_round(error)
        if receipt is not None and verb in (Verb.APPROVE, Verb.EDIT):
            hold, dial = await reviewer_breaker(env, principal, current)
            cap, quorum = dial.auto_send_cap_per_day, Quorum.of(dial)
            if hold is None and quorum.approvals > 1 and not quorum.review_agent_counts:
                hold = QUORUM_REQUIRED
    pooled = False
    if receipt is not None and verb in (Verb.APPROVE, Verb.EDIT) and hold is None:
        # A review agent's release is one no human reviewed: it spends the From domain's shared pool.
        spent = await env.peers.consume_pool_send(principal, current.from_address, current.id)
        pooled, hold = spent.allowed, None if spent.allowed else POOL_BUDGET
    return _Admitted(Gates(hold, cap, quorum, stale), receipt, pooled)


async def _counted(env: Env, principal: Principal, review_id: str, decision: Decision) -> Review | None:
    """The review, when this is a repeat of an approval that already stands on the revision it names
    (a quorum's approver approving twice counts once, though the version moved on since)."""
    if decision.action != "approve":
        return None
    async with env.db.engine.connect() as conn:
        review = await _kernel.load(conn, principal, review_id)
        if review.revision != decision.revision or review.state is State.APPROVED:
            return None
        standing = approvers(await store.list_turns(conn, review_id), review.revision)
    return review if principal.actor_id in standing else None


def _refused_round(error: DomainError) -> str:
    """Why dispatch_budget admitted no round: the no-verdict cap stopped automatic rounds (its refusal
    carries the ``no_verdict`` count), or the round budget is spent."""
    if any(name == "no_verdict" for name, _ in error.hints):
        return NO_VERDICT_CAP
    return MAX_HOPS


async def _settle_round(env: Env, principal: Principal, receipt: str, **outcome: str) -> None:
    """Record how an admitted round ended. The decision has already happened either way; an
    unsettled receipt stays spent (dispatch_budget fails closed), so a lost settlement only logs."""
    try:
        await env.peers.settle_reviewer_round(principal, receipt, **outcome)
    except DomainError as error:
        log.warning("review-agent round %s not settled: %s", receipt, error)


async def _edit_diff(
    env: Env, principal: Principal, current: Review, decision: Decision
) -> tuple[Review, DiffResult]:
    """The edit's new fields and its diff, computed (not stored) by the diff service: it is stored
    through the outbox only if the edit wins the compare-and-set."""
    edited = decision.edited(current)
    diff = await env.peers.compute_diff(
        principal,
        current.id,
        current.revision,
        current.revision + 1,
        diffable(current),
        diffable(edited),
    )
    return edited, diff


def _rule_request(principal: Principal, current: Review, new_rule: dict[str, str]) -> SaveRuleRequest:
    """A decision's new rule as the rules context saves it: a general rule names no category; a
    category rule defaults to the review's; a per-agent rule is for the review's own agent; house style
    is the org layer (the rules context refuses it to anyone but an admin). Its id and the decision
    turn's are minted here, so the turn names the rule and the rule names the turn it was learnt from."""
    scope = new_rule.get("scope") or "general"
    agent_id = new_rule.get("scope_agent_id") or ""
    if agent_id and agent_id != current.agent_id:
        raise invalid(
            "/new_rule/scope_agent_id", f"a per-agent rule is for the review's agent, {current.agent_id}"
        )
    return SaveRuleRequest(
        principal=principal.to_proto(),
        rule_text=new_rule["rule_text"],
        scope=scope,
        category_id=new_rule.get("category_id") or (current.category_id if scope == "category" else ""),
        source_review_id=current.id,
        source_turn_id=new_id("turn"),
        rule_layer=new_rule.get("rule_layer") or "project",
        agent_id=agent_id,
        rule_id=new_id("rule"),
    )


async def _apply_decision(
    env: Env,
    principal: Principal,
    current: Review,
    decision: Decision,
    actor: Actor,
    gates: Gates,
    fields: dict[str, Any],
    idempotency_key: str,
) -> tuple[Review, str]:
    """The decision's last peer calls (an edit's diff, a new rule's check), its unit of work
    (``_DecisionUnit``), then its release: to delivery, or after its undo window. Returns the review as
    it now is, and the breaker that held a review agent's release ("" for none)."""
    edited: Review | None = None
    diff: DiffResult | None = None
    if decision.verb() is Verb.EDIT and gates.hold is None:
        edited, diff = await _edit_diff(env, principal, current, decision)
    rule: SaveRuleRequest | None = None
    if decision.new_rule and gates.hold is None:
        # Checked now (a bad rule is the decision's 400), saved by the rules context only once the
        # decision commits: it travels in the decision's outbox, so a lost race leaves no rule.
        rule = _rule_request(principal, current, decision.new_rule)
        await env.peers.check_rule(principal, rule)
    unit = _DecisionUnit(env, principal, current, decision, actor, gates, edited, diff, rule)
    review, held_by, replayed = await _kernel.once(
        env.db, principal, idempotency_key, fields, unit, checked=True
    )
    if unit.windows and not replayed:  # nothing to wait for: it goes to delivery once its window closes
        release_later(env, review.id, unit.windows[-1])
        return review, held_by
    # A replay drives a delivery left unfinished, claiming it as any worker does.
    return await deliver(env, review, None if replayed or not unit.claims else unit.claims[-1]), held_by


@dataclass
class _DecisionUnit:
    """A decision's unit of work. Under a quorum, an approval (or edit) short of it is counted and the
    draft stays open; the one that completes it releases the draft."""

    env: Env
    principal: Principal
    current: Review  # the precheck's read: its version is the compare-and-set's
    decision: Decision
    actor: Actor
    gates: Gates
    edited: Review | None  # an edit's new content
    diff: DiffResult | None
    rule: SaveRuleRequest | None  # the new rule the decision teaches
    claims: list[Claim] = field(default_factory=list)  # the lease of the attempt each run recorded
    windows: list[datetime] = field(default_factory=list)  # or when a release waits out its undo window

    async def __call__(self, uow: UnitOfWork) -> tuple[Review, str]:
        principal, decision, gates = self.principal, self.decision, self.gates
        verb = decision.verb()
        now = utcnow()
        if gates.hold is not None:
            return await _hold(uow, principal, self.current.id, decision, gates.hold)
        # The precheck's read, not a second one: the compare-and-set on its version refuses the
        # decision (409 stale) if another writer moved the review since.
        before = self.current
        counted = await _count(uow, principal, before, verb, self.actor, gates.quorum)
        if counted is None:
            return before, ""  # the same approver twice counts once
        prior, short = counted
        if (
            gates.cap is not None
            and not short
            and not await spend_cap(uow, before.project_id, before.category_id, gates.cap)
        ):
            # The daily cap is spent in this unit: a release that does not commit spends nothing.
            return await _hold(uow, principal, before.id, decision, "daily_cap")
        # The send's ids go in the decision's own compare-and-set when it approves (one CAS, not two).
        send = send_columns(before, "human_reviewed" if self.actor is Actor.HUMAN else "reviewer_approved")
        # A human approving a held draft as it stands, having confirmed it: recorded on the decision turn.
        override = (
            decision.override_held and self.actor is Actor.HUMAN and verb is Verb.APPROVE and gates.stale
        )
        ballot = Ballot(short, override, hop=self.actor is Actor.REVIEW_AGENT)
        step = decision_move(
            decision, before, self.edited, self._turn(before, ballot), send, now, principal.actor_id, ballot
        )
        cas = store.Cas(last=True, not_stale=not gates.stale)
        edge = await _kernel.move(uow, before, _kernel.actor_of(principal, before), step, cas)
        release = (
            release_at(now, self.env.settings.undo_window_s) if edge.after.state is State.APPROVED else None
        )
        # The category counts the review's outcome once, when decided (a release in its undo window:
        # when it goes to delivery, ``delivery.claim_due``).
        self._publish(uow, edge, prior, counted=not short and release is None)
        if release is not None:
            hold_release(uow, edge, send, now, release)  # its undo window first
            self.windows.append(release)
        elif edge.after.state is State.APPROVED:
            lease = self.env.settings.delivery_lease
            self.claims.append(await record_attempt(uow, edge.after, send, now, lease))
        return edge.after, ""

    def _turn(self, before: Review, ballot: Ballot) -> Turn:
        """The decision's turn: what the decider said, the edit's diff, the rule it teaches."""
        decision, diff, rule = self.decision, self.diff, self.rule
        return _kernel.turn(
            self.principal,
            "decision",
            turn_body(decision, ballot),
            action=decision.action,
            changed=changed(self.edited, before),
            diff_json=orjson.loads(diff.diff_json) if diff is not None and diff.diff_json else None,
            diff_unified=diff.diff_unified if diff is not None else None,
            rule_ids=[rule.rule_id] if rule is not None else [],
            turn_id=rule.source_turn_id if rule is not None else "",
        )

    def _publish(self, uow: UnitOfWork, edge: Edge, prior: list[Turn], *, counted: bool) -> None:
        """The events a decision sends beyond its edge's nudge: the edit's diff, the rule it teaches, an
        escalation, and (``counted``) the outcome its category counts."""
        before, after, turn = edge.before, edge.after, edge.turn
        assert turn is not None
        if self.diff is not None:
            _events.publish_diff(uow, self.principal, before, self.diff)
        if self.rule is not None:
            _events.request_rule(uow, after, self.rule)
        if edge.verb is Verb.ESCALATE:
            escalation = self.decision.escalation or Escalation()
            _events.publish_escalation(uow, after, turn.id, escalation, self.decision.feedback)
        if counted:
            _events.publish_outcome(uow, after, decision_of(decisions_of([*prior, turn])))


async def _count(
    uow: UnitOfWork, principal: Principal, before: Review, verb: Verb, actor: Actor, quorum: Quorum
) -> tuple[list[Turn], bool] | None:
    """The thread's turns a quorum or a panel counts (none when neither does) and whether an approval
    (or edit) is short of its quorum; None for an approver approving twice (it counts once). Counted in
    the unit whose compare-and-set on the version writes the decision: two deciders racing for the last
    slot (or panel seat) cannot both see it free."""
    counting = quorum.approvals > 1 and verb in (Verb.APPROVE, Verb.EDIT)
    seated = bool(quorum.panel) and actor is Actor.HUMAN
    if not (counting or seated):
        return [], False
    prior = await store.list_turns(uow.conn, before.id)
    if seated:
        _check_panel(panel(prior), principal.actor_id, quorum.panel)
    if not counting:
        return prior, False
    standing = approvers(prior, before.revision, review_agent_counts=quorum.review_agent_counts)
    if verb is Verb.APPROVE and principal.actor_id in standing:
        return None
    return prior, (1 if verb is Verb.EDIT else len(standing) + 1) < quorum.approvals


def _check_panel(members: list[str], actor_id: str, size: int) -> None:
    """``forbidden_scope`` for a human outside a full panel: the category lets only ``size`` distinct
    humans decide a draft, and they already have. Not a 409: no re-read or retry makes this key one of
    them (the same reason a key of the wrong kind is refused)."""
    if actor_id in members or len(members) < size:
        return
    raise DomainError(
        Code.FORBIDDEN_SCOPE,
        f"This draft's review panel is full: its category lets {size} distinct humans decide a draft, and "
        f"{', '.join(members)} already have. Only they may decide it; ask one of them.",
        hints=(("reason", "quorum_panel_full"), *(("panel_member", m) for m in members)),
    )


async def _force_past_deadline(env: Env, review: Review) -> Review:
    """The review-deadline breaker returns the draft to the human queue, once: the hold is a
    compare-and-set on the row, and a draft it already forced is left as it is."""
    if review.gate_outcome == FORCED_PAST_DEADLINE:
        return review
    system = Principal(review.org_id, review.project_id, ActorKind.SYSTEM, SYSTEM_ACTOR)
    async with env.db.transaction() as uow:
        edge = await _kernel.move(
            uow,
            review,
            Actor.SYSTEM,
            Move(
                Verb.HOLD,
                facts=Facts(breaker=REVIEW_DEADLINE_PASSED),
                changed=replace(review, gate_outcome=FORCED_PAST_DEADLINE),
                turn=_kernel.turn(
                    system, "breaker", "The review deadline passed before a review agent decided."
                ),
            ),
        )
    return edge.after


async def sweep_review_deadlines(env: Env, now: datetime | None = None, limit: int = 100) -> list[str]:
    """The review-deadline breaker's sweep, which any replica may run: every draft whose deadline
    passed before a review agent decided is forced to the human, once. Two sweeps that read the same
    draft race on its compare-and-set: the loser sees ``stale`` and leaves it. Returns the ids forced."""
    now = now or utcnow()
    async with env.db.engine.connect() as conn:
        due = await store.past_review_deadline(conn, now, FORCED_PAST_DEADLINE, limit)
    forced = []
    for review in due:
        try:
            await _force_past_deadline(env, review)
        except DomainError as error:
            if error.code is not Code.STALE:
                raise
            continue  # another replica, a reviewer or the composer moved it first
        forced.append(review.id)
    return forced


async def _hold(
    uow: UnitOfWork, principal: Principal, review_id: str, decision: Decision, breaker_name: str
) -> tuple[Review, str]:
    """A circuit breaker overrode a review agent's release: the draft stays in the human queue."""
    before = await _kernel.load(uow.conn, principal, review_id)
    edge = await _kernel.move(
        uow,
        before,
        Actor.SYSTEM,
        Move(
            Verb.HOLD,
            parent_revision=decision.revision,
            expected_version=decision.version,
            facts=Facts(breaker=breaker_name),
            changed=replace(
                before,
                gate_outcome=f"held:{breaker_name}",
                reviewer_hops=before.reviewer_hops + 1,
                review_deadline=None,  # the draft is the human's now
            ),
            turn=_kernel.turn(principal, "breaker", decision.feedback, action=decision.action),
        ),
    )
    return edge.after, breaker_name
