"""Fixtures for review_state's use cases: a migrated store per backend, the other contexts as an
in-memory stand-in (the real ones are exercised end to end in tests/e2e), and the .eml provider."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf.json_format import ParseError
from review_state import app
from review_state.__main__ import SPEC
from review_state.app import Env, Settings
from review_state.clients import CategoryInfo, DiffResult, PoolSend, StackVersions, TokenCheck
from review_state.domain.review import Review
from review_state.domain.submission import Dial, Draft, Intent
from review_state.providers import AtData, EmlProvider, OutcomeUnknown, Refused
from reviewloop.budget.v1 import budget_pb2
from reviewloop.diff.v1.diff_pb2 import DiffCommitted
from reviewloop.errors import Code, DomainError
from reviewloop.review.v1.events_pb2 import (
    Escalated,
    EscalationMail,
    HumansNotified,
    NudgeRequested,
    ReviewOutcome,
    RuleWithdrawn,
)
from reviewloop.rules.v1.rules_pb2 import SaveRuleRequest
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, codec
from reviewloop.storage.schema import OUTBOX
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import select

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]

AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_1")
OTHER_AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_2")
HUMAN = Principal("org_1", "prj_1", ActorKind.HUMAN, "key_h")
REVIEWER = Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_r")
ADMIN = Principal("org_1", "prj_1", ActorKind.ADMIN, "key_a")
INTENT = Intent("Re-engage cold lead at Acme about Q3 pilot")
DRAFT = Draft(
    to=["vp@acme.com"],
    cc=[],
    bcc=[],
    subject="Q3 pilot",
    body_text="Let me know your thoughts.",
    intent=INTENT,
)


@dataclass
class FakePeers:
    """rules, diff and dispatch_budget as plain data: what they would answer."""

    token_status: str = "valid"
    token_high_water: int = 5
    current_high_water: int = 5
    stack_high_water_now: int = 0  # the stack's high-water a draft without a token is checked against
    house_style_version_now: int = 0  # the versions get_rules reports (a restamp names them)
    category_rules_version_now: int = 0
    on_stack_read: Callable[[], Awaitable[Any]] | None = None  # run while rules answers GetRules
    category_state: str = "supervised"
    never_graduate: bool = False
    dial: Dial = field(default_factory=lambda: Dial(0.7, False, 0.0, 200))
    round_limit: int = 5
    no_verdict_limit: int = 3  # automatic rounds stop after this many ended without a verdict
    # attempt key -> [review id, receipt id, settlement]; settlement is "" until settled
    rounds: dict[str, list[str]] = field(default_factory=dict)
    # run while a round is being admitted: a concurrent writer a test wants to win the race
    on_admit: Callable[[], Awaitable[Any]] | None = None
    down: bool = False
    # the shared sending pools: pool -> the reviews holding a unit (refunds by the outbox are not seen)
    pool_budget: int = 1_000_000
    pool_receipts: dict[str, set[str]] = field(default_factory=dict)
    diff_down: bool = False
    # the new rules decisions had checked (a dry run: the rule itself travels in the outbox)
    rules_checked: list[SaveRuleRequest] = field(default_factory=list)
    rule_refusal: DomainError | None = None
    # the project's pacing values (rules' GetPacingSettings); an interval of 0 refills at once
    pacing: dict[str, int] = field(
        default_factory=lambda: {"lookahead_window": 3, "rework_batch_max": 10, "nudge_min_interval_ms": 0}
    )

    def _check(self) -> None:
        if self.down:
            raise DomainError(Code.UNAVAILABLE, "The rules service is unavailable; nothing was written.")

    async def validate_token(self, principal: Principal, token: str, category_id: str) -> TokenCheck:
        self._check()
        return TokenCheck(self.token_status, self.token_high_water, self.current_high_water)

    async def get_category(self, principal: Principal, category_id: str) -> CategoryInfo:
        self._check()
        return CategoryInfo(category_id, self.category_state, self.never_graduate)

    async def get_dial(self, principal: Principal, category_id: str) -> Dial:
        self._check()
        return self.dial

    async def check_rule(self, principal: Principal, rule: SaveRuleRequest) -> None:
        self._check()
        if self.rule_refusal is not None:
            raise self.rule_refusal
        self.rules_checked.append(rule)

    async def stack_high_water(self, principal: Principal, category_id: str) -> int:
        self._check()
        now = self.stack_high_water_now
        if self.on_stack_read is not None:
            await self.on_stack_read()
        return now

    async def stack_versions(self, principal: Principal, category_id: str) -> StackVersions:
        self._check()
        return StackVersions(
            self.house_style_version_now, self.category_rules_version_now, self.stack_high_water_now
        )

    async def pacing_settings(self, principal: Principal) -> dict[str, int]:
        self._check()
        return dict(self.pacing)

    async def compute_diff(
        self,
        principal: Principal,
        review_id: str,
        from_revision: int,
        to_revision: int,
        before: dict[str, Any],
        after: dict[str, Any],
    ) -> DiffResult:
        self._check()
        if self.diff_down:
            raise DomainError(Code.UNAVAILABLE, "The diff service is unavailable; nothing was written.")
        changed = [k for k in ("subject", "body_text") if before[k] != after[k]]
        diff_json = orjson.dumps(
            {
                "fields_changed": changed,
                "hunks": [
                    {"field": k, "op": "replace", "before": before[k], "after": after[k]} for k in changed
                ],
            }
        ).decode()
        unified = "".join(f"--- {k}\n+++ {k}\n" for k in changed)
        return DiffResult(unified, diff_json, changed, hashlib.sha256(diff_json.encode()).hexdigest())

    async def consume_pool_send(self, principal: Principal, sender: str, review_id: str) -> PoolSend:
        self._check()
        pool = sender.rpartition("@")[2].lower()
        held = self.pool_receipts.setdefault(pool, set())
        if review_id not in held and len(held) >= self.pool_budget:
            return PoolSend(False, pool, len(held), self.pool_budget)
        held.add(review_id)
        return PoolSend(True, pool, len(held), self.pool_budget)

    async def refund_pool_send(self, principal: Principal, review_id: str) -> None:
        self._check()
        for held in self.pool_receipts.values():
            held.discard(review_id)

    async def admit_reviewer_round(
        self, principal: Principal, review_id: str, attempt_key: str, first_round: bool
    ) -> str:
        self._check()
        if attempt_key in self.rounds:
            return self.rounds[attempt_key][1]
        mine = [r for r in self.rounds.values() if r[0] == review_id]
        spent = [r for r in mine if r[2] != "superseded"]
        if len(spent) >= self.round_limit:  # dispatch_budget's refusals, as check_admission words them
            raise DomainError(
                Code.QUOTA_EXCEEDED, "round budget spent", hints=(("review_round_budget", "5/5"),)
            )
        no_verdict = len(mine) - len(spent)
        if not first_round and no_verdict >= self.no_verdict_limit:
            raise DomainError(
                Code.QUOTA_EXCEEDED, "automatic launch stopped", hints=(("no_verdict", str(no_verdict)),)
            )
        self.rounds[attempt_key] = [review_id, f"rcpt_{len(self.rounds) + 1}", ""]
        if self.on_admit is not None:
            await self.on_admit()
        return self.rounds[attempt_key][1]

    async def settle_reviewer_round(
        self, principal: Principal, receipt_id: str, verdict: str = "", no_verdict_reason: str = ""
    ) -> None:
        self._check()
        for round_ in self.rounds.values():
            if round_[1] == receipt_id:
                round_[2] = verdict or no_verdict_reason


class SwitchProvider(EmlProvider):
    """The .eml provider, told to refuse or to lose the outcome when a test needs it."""

    mode = "ok"  # ok | refuse | unknown (past DATA)

    async def deliver(
        self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str, at_data: AtData
    ) -> None:
        if self.mode == "refuse":
            raise Refused("550 mailbox unavailable")
        if self.mode == "unknown":
            await at_data()
            raise OutcomeUnknown("SMTPServerDisconnected")
        await super().deliver(raw, sender, recipients, rfc_message_id, at_data)


@pytest.fixture
async def env(open_db: OpenDb, tmp_path: Path) -> Env:
    db = await open_db(SPEC)
    # Released at once: the undo window's own tests (test_undo) open one.
    return Env(db, FakePeers(), SwitchProvider(tmp_path / "outbox"), Settings(undo_window_s=0))


def provider(env: Env) -> SwitchProvider:
    assert isinstance(env.provider, SwitchProvider)
    return env.provider


def peers(env: Env) -> FakePeers:
    assert isinstance(env.peers, FakePeers)
    return env.peers


async def outbox(env: Env, destination: str = "nudge", event_type: str = "") -> list[dict[str, Any]]:
    """The events written so far for ``destination`` (only ``event_type``'s, if given; for nudge, its
    nudges unless told otherwise), oldest first."""
    event_type = event_type or ("nudge" if destination == "nudge" else "")
    query = select(OUTBOX).where(OUTBOX.c.destination == destination)
    if event_type:
        query = query.where(OUTBOX.c.type == event_type)
    async with env.db.engine.connect() as conn:
        rows = (await conn.execute(query.order_by(OUTBOX.c.id))).all()
    return [_as_read(destination, r.type, r.payload) for r in rows]


def _as_read(destination: str, event_type: str, payload: str) -> dict[str, Any]:
    """A typed event as its consumer reads it: a nudge's reason is its payload's name."""
    if event_type == "rule_withdrawn":
        return {"rule_withdrawn": codec.as_json_object(codec.decode(payload, RuleWithdrawn))}
    if destination == "rules":
        try:
            return codec.as_json_object(codec.decode(payload, ReviewOutcome))
        except ParseError:
            return {"rule_requested": codec.as_json_object(codec.decode(payload, SaveRuleRequest))}
    if destination == "diff":
        return codec.as_json_object(codec.decode(payload, DiffCommitted))
    if destination == "dispatch_budget":
        return codec.as_json_object(codec.decode(payload, budget_pb2.SettlePoolSendRequest))
    if event_type == "humans_notified":
        return codec.as_json_object(codec.decode(payload, HumansNotified))
    if event_type == "escalated":
        return codec.as_json_object(codec.decode(payload, Escalated))
    if destination == "mail":
        return codec.as_json_object(codec.decode(payload, EscalationMail))
    nudge = codec.decode(payload, NudgeRequested)
    reason = nudge.WhichOneof("payload")
    assert reason is not None
    return {
        "reason": reason,
        **{k: v for k, v in codec.as_json_object(nudge).items() if k != reason},
        "payload": codec.as_json_object(getattr(nudge, reason)),
    }


async def reasons(env: Env, review_id: str) -> list[str]:
    return [e["reason"] for e in await outbox(env) if e["review_id"] == review_id]


async def queued(env: Env, draft: Draft = DRAFT, **kwargs: Any) -> Review:
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=draft, category_id="", idempotency_key="", **kwargs)
    )
    return review


async def opened(env: Env) -> Review:
    review = await queued(env)
    return await app.open_review(env, HUMAN, review.id, review.revision, review.version)


async def reach(env: Env, state: str) -> Review:
    """A review of AGENT's, brought to ``state`` through the verbs (never by writing the row)."""
    if state == "auto_sent":
        await app.set_policy(env, ADMIN, "allow_direct")
        _, review = await app.submit(
            env,
            AGENT,
            app.SubmitRequest(
                kind="send",
                draft=Draft(**{**DRAFT.__dict__, "intent": None}),
                category_id="",
                idempotency_key="",
            ),
        )
        await app.set_policy(env, ADMIN, "require_review")
        return review
    review = await queued(env)
    if state == "needs_review":
        return review
    if state == "cancelled":
        return await app.cancel(env, AGENT, review.id, review.revision, "")
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    if state == "in_review":
        return review
    if state == "chatting":
        return (await app.post_chat(env, HUMAN, review.id, "a question for you"))[0]
    if state == "rejected":
        return await app.decide(
            env, HUMAN, review.id, app.Decision("reject", review.revision, review.version)
        )
    mode = {"sent": "ok", "failed": "refuse", "approved": "unknown"}[state]
    provider(env).mode = mode
    try:
        return await app.decide(
            env, HUMAN, review.id, app.Decision("approve", review.revision, review.version)
        )
    finally:
        provider(env).mode = "ok"
