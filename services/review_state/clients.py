"""The other contexts review_state calls synchronously: rules, diff, dispatch_budget.

Each call fails closed: a peer that is down or not built yet (UNAVAILABLE, UNIMPLEMENTED, a timeout)
is a clear ``unavailable`` DomainError, raised before anything is written. A peer's own domain error
(``not_found``, ``bad_request`` ...) travels through as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from reviewloop.budget.v1 import budget_pb2, budget_pb2_grpc
from reviewloop.diff.v1 import diff_pb2, diff_pb2_grpc
from reviewloop.errors import Code, DomainError
from reviewloop.rpc_errors import from_rpc_error
from reviewloop.rules.v1 import rules_pb2, rules_pb2_grpc
from reviewloop.service import Peers
from reviewloop.tenancy import Principal

from review_state.domain.submission import Dial

TIMEOUT_S = 5.0

_DOWN = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}


def _unavailable(service: str, what: str) -> DomainError:
    return DomainError(
        Code.UNAVAILABLE,
        f"The {service} service is unavailable, so {what} could not be checked; nothing was written. "
        "Retry shortly.",
    )


async def _call(service: str, what: str, rpc: Any, request: Any) -> Any:
    try:
        return await rpc(request, timeout=TIMEOUT_S)
    except grpc.aio.AioRpcError as exc:
        if exc.code() in _DOWN:
            raise _unavailable(service, what) from exc
        raise from_rpc_error(exc) from exc


@dataclass(frozen=True)
class TokenCheck:
    status: str  # valid | expired | stale | invalid
    token_rule_high_water: int
    current_rule_high_water: int


@dataclass(frozen=True)
class StackVersions:
    """The versions ``get_rules`` reports for a draft's stack now."""

    house_style_version: int
    category_rules_version: int
    rule_high_water: int


@dataclass(frozen=True)
class CategoryInfo:
    id: str
    state: str
    never_graduate: bool


@dataclass(frozen=True)
class DiffResult:
    diff_unified: str
    diff_json: str
    fields_changed: list[str]
    input_sha256: str = ""


class Collaborators(Protocol):
    """What review_state needs from the other contexts (the real one is ``GrpcCollaborators``)."""

    async def validate_token(self, principal: Principal, token: str, category_id: str) -> TokenCheck: ...
    async def get_category(self, principal: Principal, category_id: str) -> CategoryInfo: ...
    async def get_dial(self, principal: Principal, category_id: str) -> Dial: ...
    async def check_rule(self, principal: Principal, rule: rules_pb2.SaveRuleRequest) -> None: ...
    async def stack_high_water(self, principal: Principal, category_id: str) -> int: ...
    async def stack_versions(self, principal: Principal, category_id: str) -> StackVersions: ...
    async def pacing_settings(self, principal: Principal) -> dict[str, int]: ...
    async def compute_diff(
        self,
        principal: Principal,
        review_id: str,
        from_revision: int,
        to_revision: int,
        before: dict[str, Any],
        after: dict[str, Any],
    ) -> DiffResult: ...
    async def admit_reviewer_round(
        self, principal: Principal, review_id: str, attempt_key: str, first_round: bool
    ) -> str: ...
    async def settle_reviewer_round(
        self, principal: Principal, receipt_id: str, verdict: str = "", no_verdict_reason: str = ""
    ) -> None: ...
    async def consume_pool_send(self, principal: Principal, sender: str, review_id: str) -> PoolSend: ...
    async def refund_pool_send(self, principal: Principal, review_id: str) -> None: ...


@dataclass(frozen=True)
class PoolSend:
    """dispatch_budget's answer to a pool spend: whether the release may go out, and the pool's state."""

    allowed: bool
    pool: str
    used_today: int
    budget_per_day: int


_TOKEN = {
    rules_pb2.TOKEN_STATUS_VALID: "valid",
    rules_pb2.TOKEN_STATUS_EXPIRED: "expired",
    rules_pb2.TOKEN_STATUS_STALE: "stale",
    rules_pb2.TOKEN_STATUS_INVALID: "invalid",
}


def _fields(values: dict[str, Any]) -> diff_pb2.MessageFields:
    return diff_pb2.MessageFields(
        subject=values.get("subject", ""),
        body_text=values.get("body_text", ""),
        body_html=values.get("body_html") or "",
        to=values.get("to", []),
        cc=values.get("cc", []),
        bcc=values.get("bcc", []),
        reply_to=values.get("reply_to") or "",
        headers=values.get("headers", {}),
    )


class GrpcCollaborators:
    def __init__(self, peers: Peers) -> None:
        self.rules = rules_pb2_grpc.RulesServiceStub(peers.channel("rules"))
        self.diff = diff_pb2_grpc.DiffServiceStub(peers.channel("diff"))
        self.budget = budget_pb2_grpc.DispatchBudgetServiceStub(peers.channel("dispatch_budget"))

    async def validate_token(self, principal: Principal, token: str, category_id: str) -> TokenCheck:
        reply = await _call(
            "rules",
            "the composition_token",
            self.rules.ValidateCompositionToken,
            rules_pb2.ValidateCompositionTokenRequest(
                principal=principal.to_proto(), composition_token=token, category_id=category_id
            ),
        )
        return TokenCheck(
            _TOKEN.get(reply.status, "invalid"), reply.token_rule_high_water, reply.current_rule_high_water
        )

    async def get_category(self, principal: Principal, category_id: str) -> CategoryInfo:
        reply = await _call(
            "rules",
            "the category",
            self.rules.GetCategory,
            rules_pb2.GetCategoryRequest(principal=principal.to_proto(), category_id=category_id),
        )
        return CategoryInfo(reply.id, reply.state, reply.never_graduate)

    async def get_dial(self, principal: Principal, category_id: str) -> Dial:
        reply = await _call(
            "rules",
            "the risk dial",
            self.rules.GetRiskDial,
            rules_pb2.GetRiskDialRequest(principal=principal.to_proto(), category_id=category_id),
        )
        values = reply.account
        for category in reply.categories:
            if category.category_id == category_id:
                values = category.effective
        return Dial(
            min_confidence=values.min_confidence,
            first_contact_gate=values.first_contact_gate,
            canary_rate=values.canary_rate,
            auto_send_cap_per_day=values.auto_send_cap_per_day,
            quorum_approvals=values.quorum_approvals or 1,
            quorum_review_agent=values.quorum_review_agent,
            review_deadline_minutes=values.review_deadline_minutes,
            quorum_panel=values.quorum_panel,
        )

    async def check_rule(self, principal: Principal, rule: rules_pb2.SaveRuleRequest) -> None:
        """Every check the rules context makes of ``rule`` (a dry run: nothing is written)."""
        request = rules_pb2.SaveRuleRequest()
        request.CopyFrom(rule)
        request.principal.CopyFrom(principal.to_proto())
        request.dry_run = True
        await _call("rules", "the new rule", self.rules.SaveRule, request)

    async def stack_high_water(self, principal: Principal, category_id: str) -> int:
        """The rule high-water of the stack a draft of ``category_id`` is composed under now."""
        return (await self.stack_versions(principal, category_id)).rule_high_water

    async def stack_versions(self, principal: Principal, category_id: str) -> StackVersions:
        """The house-style and category rules-versions and the high-water of ``category_id``'s stack."""
        reply = await _call(
            "rules",
            "the rule stack",
            self.rules.GetRules,
            rules_pb2.GetRulesRequest(principal=principal.to_proto(), category_id=category_id),
        )
        return StackVersions(
            int(reply.house_style_version), int(reply.category_rules_version), int(reply.rule_high_water)
        )

    async def pacing_settings(self, principal: Principal) -> dict[str, int]:
        """The project's backlog pacing values in force (lookahead_window, rework_batch_max,
        nudge_min_interval_ms)."""
        reply = await _call(
            "rules",
            "the pacing settings",
            self.rules.GetPacingSettings,
            rules_pb2.GetPacingSettingsRequest(principal=principal.to_proto()),
        )
        return {f.name: int(v) for f, v in reply.values.ListFields()}

    async def compute_diff(
        self,
        principal: Principal,
        review_id: str,
        from_revision: int,
        to_revision: int,
        before: dict[str, Any],
        after: dict[str, Any],
    ) -> DiffResult:
        reply = await _call(
            "diff",
            "the edit's diff",
            self.diff.ComputeDiff,
            diff_pb2.ComputeDiffRequest(
                principal=principal.to_proto(),
                review_id=review_id,
                from_revision=from_revision,
                to_revision=to_revision,
                before=_fields(before),
                after=_fields(after),
                dry_run=True,  # stored through the outbox once the edit committed
            ),
        )
        return DiffResult(reply.diff_unified, reply.diff_json, list(reply.fields_changed), reply.input_sha256)

    async def admit_reviewer_round(
        self, principal: Principal, review_id: str, attempt_key: str, first_round: bool
    ) -> str:
        """Admit one review-agent round: its receipt. Raises dispatch_budget's ``quota_exceeded`` when
        the round budget is spent or the no-verdict cap stopped automatic rounds (a ``no_verdict`` hint).

        A review is its own canonical run in dispatch_budget (there is no PR), recorded on its first
        round. The attempt key names the (revision, version) decided on, so a retried decision
        reattaches to its receipt instead of spending a second round."""
        request = budget_pb2.AdmitReviewRoundRequest(
            principal=principal.to_proto(),
            run_id=review_id,
            attempt_key=attempt_key,
            kind=budget_pb2.ATTEMPT_KIND_INITIAL if first_round else budget_pb2.ATTEMPT_KIND_RECHECK,
            # The first round is the composer's request; later ones re-review a redraft.
            trigger=budget_pb2.LAUNCH_TRIGGER_OPERATOR_REQUEST
            if first_round
            else budget_pb2.LAUNCH_TRIGGER_FIX_REREVIEW,
        )
        what = "the review-agent round budget"
        try:
            reply = await _call("dispatch_budget", what, self.budget.AdmitReviewRound, request)
        except DomainError as error:
            if error.code is not Code.NOT_FOUND:
                raise
            await _call(
                "dispatch_budget",
                what,
                self.budget.RecordRun,
                budget_pb2.RecordRunRequest(principal=principal.to_proto(), run_id=review_id),
            )
            reply = await _call("dispatch_budget", what, self.budget.AdmitReviewRound, request)
        return str(reply.receipt.receipt_id)

    async def consume_pool_send(self, principal: Principal, sender: str, review_id: str) -> PoolSend:
        """Spend one unit of the sender's shared pool (deployment-wide, per From domain) before a
        release, once per review; ``allowed`` false when the pool's daily budget is spent."""
        reply = await _call(
            "dispatch_budget",
            "the shared sending pool",
            self.budget.ConsumePoolSend,
            budget_pb2.ConsumePoolSendRequest(
                principal=principal.to_proto(), sender=sender, review_id=review_id
            ),
        )
        return PoolSend(reply.allowed, reply.pool, reply.used_today, reply.budget_per_day)

    async def refund_pool_send(self, principal: Principal, review_id: str) -> None:
        """Give back the unit of a release that never committed (a twin, a failed unit of work)."""
        await _call(
            "dispatch_budget",
            "the shared sending pool's refund",
            self.budget.SettlePoolSend,
            budget_pb2.SettlePoolSendRequest(
                principal=principal.to_proto(),
                review_id=review_id,
                outcome=budget_pb2.POOL_SEND_OUTCOME_NOT_SENT,
            ),
        )

    async def settle_reviewer_round(
        self, principal: Principal, receipt_id: str, verdict: str = "", no_verdict_reason: str = ""
    ) -> None:
        await _call(
            "dispatch_budget",
            "the review-agent round's settlement",
            self.budget.SettleAttempt,
            budget_pb2.SettleAttemptRequest(
                principal=principal.to_proto(),
                receipt_id=receipt_id,
                verdict=verdict,
                no_verdict_reason=no_verdict_reason,
            ),
        )
