"""The DispatchBudgetService servicer: translate protobuf to domain types, call ``app``, translate
back. Authorization and every rule live in the use cases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import grpc
import orjson
from reviewloop.budget.v1 import budget_pb2, budget_pb2_grpc
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import invalid
from reviewloop.protoconv import enum_name, from_enum, required_enum, stamp, to_enum
from reviewloop.service import Registration
from reviewloop.tenancy import Principal

from dispatch_budget import app
from dispatch_budget.domain.budget import AttemptKind, ExtensionInput, RunStatus, Trigger
from dispatch_budget.domain.gate import GateRecord, SessionState
from dispatch_budget.domain.lineage import Binding
from dispatch_budget.domain.rounds import Budget, ExtensionReceipt, Origin, Receipt, Run, RunModes
from dispatch_budget.domain.selection import ReviewMode, RunnerSpec
from dispatch_budget.env import Env

if TYPE_CHECKING:
    from google.protobuf.internal.enum_type_wrapper import _EnumTypeWrapper

    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]

V = TypeVar("V", bound=int)


def _number(enum: _EnumTypeWrapper[V], prefix: str, name: str) -> V:
    """``protoconv.to_enum``, typed as the generated enum's own value type."""
    return cast(V, to_enum(enum, prefix, name))


MODE = (budget_pb2.ReviewMode, "REVIEW_MODE_")
RUN_STATUS = (budget_pb2.RunStatus, "RUN_STATUS_")
ATTEMPT_KIND = (budget_pb2.AttemptKind, "ATTEMPT_KIND_")
TRIGGER = (budget_pb2.LaunchTrigger, "LAUNCH_TRIGGER_")
OUTCOME = (budget_pb2.SettlementOutcome, "SETTLEMENT_OUTCOME_")
TURN_STATUS = (budget_pb2.TurnStatus, "TURN_STATUS_")
ACTOR_KIND = (common_pb2.ActorKind, "ACTOR_KIND_")


def _mode(number: int) -> ReviewMode | None:
    return from_enum(ReviewMode, *MODE, number)


def _mode_number(mode: ReviewMode | None) -> budget_pb2.ReviewMode.ValueType:
    return _number(*MODE, mode.value) if mode else budget_pb2.REVIEW_MODE_UNSPECIFIED


def _modes(review: int, pr_work: int, repeat_context: int) -> RunModes:
    return RunModes(_mode(review), _mode(pr_work), _mode(repeat_context))


def _json_object(text: str, field: str) -> dict[str, Any]:
    try:
        config = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise invalid(field, "not valid JSON") from None
    if not isinstance(config, dict):
        raise invalid(field, "must be a JSON object")
    return config


def _json(text: str, field: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise invalid(field, "not valid JSON") from None


def review_config_to_proto(config: dict[str, Any], mode: ReviewMode | None) -> budget_pb2.ReviewConfig:
    return budget_pb2.ReviewConfig(config_json=orjson.dumps(config).decode(), mode=_mode_number(mode))


def runner_from_proto(r: budget_pb2.Runner) -> RunnerSpec:
    return RunnerSpec(
        name=r.name,
        models=tuple(r.models),
        efforts=tuple(r.efforts),
        default_model=r.default_model,
        default_effort=r.default_effort,
        supports_warm=r.supports_warm,
        supports_model_change=r.supports_model_change,
    )


def runner_to_proto(spec: RunnerSpec) -> budget_pb2.Runner:
    return budget_pb2.Runner(
        name=spec.name,
        models=list(spec.models),
        efforts=list(spec.efforts),
        default_model=spec.default_model,
        default_effort=spec.default_effort,
        supports_warm=spec.supports_warm,
        supports_model_change=spec.supports_model_change,
    )


def binding_to_proto(binding: Binding) -> budget_pb2.ReviewSessionBinding:
    return budget_pb2.ReviewSessionBinding(
        review_id=binding.review_id,
        session_id=binding.session_id,
        mode=_mode_number(binding.mode),
        range_base=binding.range_base,
        range_head=binding.range_head,
        fresh_session=binding.fresh_session,
        selection=selection_to_proto(binding.selection.to_json()),
        busy=binding.busy,
    )


def selection_to_dict(message: budget_pb2.ReviewSelection) -> dict[str, str]:
    return {
        "runner": message.runner,
        "model": message.model,
        "effort": message.effort,
        "mode": enum_name(*MODE, message.mode),
    }


def selection_to_proto(selection: dict[str, str]) -> budget_pb2.ReviewSelection:
    mode = selection.get("mode") or ""
    return budget_pb2.ReviewSelection(
        runner=selection.get("runner", ""),
        model=selection.get("model", ""),
        effort=selection.get("effort", ""),
        mode=_number(*MODE, mode) if mode else budget_pb2.REVIEW_MODE_UNSPECIFIED,
    )


def run_to_proto(run: Run) -> budget_pb2.Run:
    return budget_pb2.Run(
        run_id=run.run_id,
        repository=run.repository,
        pr_number=run.pr_number,
        head_sha=run.head_sha,
        status=_number(*RUN_STATUS, run.status),
        scope_key=run.scope_key,
        review_mode=_mode_number(run.modes.review),
        pr_work_review_mode=_mode_number(run.modes.pr_work),
        repeat_review_context_mode=_mode_number(run.modes.repeat_context),
    )


def receipt_to_proto(receipt: Receipt) -> budget_pb2.AdmissionReceipt:
    message = budget_pb2.AdmissionReceipt(
        receipt_id=receipt.receipt_id,
        run_id=receipt.run_id,
        scope_key=receipt.scope_key,
        attempt_key=receipt.attempt_key,
        kind=_number(*ATTEMPT_KIND, receipt.kind),
        trigger=_number(*TRIGGER, receipt.trigger),
        head_sha=receipt.head_sha,
        selection=selection_to_proto(receipt.selection),
        admitted_at=stamp(receipt.admitted_at),
        round=receipt.round,
    )
    if receipt.outcome is not None:
        settlement = message.settlement
        settlement.outcome = _number(*OUTCOME, receipt.outcome)
        settlement.reason = receipt.reason or ""
        settlement.verdict = receipt.verdict or ""
        if receipt.settled_at is not None:
            settlement.settled_at.CopyFrom(stamp(receipt.settled_at))
    return message


def extension_to_proto(receipt: ExtensionReceipt) -> budget_pb2.ExtensionReceipt:
    origin = receipt.origin
    return budget_pb2.ExtensionReceipt(
        receipt_id=receipt.receipt_id,
        idempotency_key=receipt.idempotency_key,
        request_id=receipt.request_id,
        run_id=receipt.run_id,
        repository=receipt.repository,
        pr_number=receipt.pr_number,
        scope_key=receipt.scope_key,
        approved_head=receipt.approved_head,
        prior_limit=receipt.prior_limit,
        new_limit=receipt.new_limit,
        scope_brief=receipt.scope_brief,
        origin=budget_pb2.RequestOrigin(
            actor_kind=_number(*ACTOR_KIND, origin.actor_kind),
            actor_id=origin.actor_id,
            key_id=origin.key_id,
            remote_addr=origin.remote_addr,
            user_agent=origin.user_agent,
        ),
        granted_at=stamp(receipt.granted_at),
    )


def origin_from_proto(message: budget_pb2.RequestOrigin) -> Origin:
    return Origin(
        enum_name(*ACTOR_KIND, message.actor_kind),
        message.actor_id,
        message.key_id,
        message.remote_addr,
        message.user_agent,
    )


def budget_to_proto(budget: Budget) -> budget_pb2.RoundBudget:
    b = budget.budget
    message = budget_pb2.RoundBudget(
        scope_key=budget.scope_key,
        used=b.used,
        limit=b.limit,
        admissions=b.admissions,
        no_verdict=b.no_verdict,
        no_verdict_limit=b.no_verdict_limit,
        label=b.label,
        exhausted=b.exhausted,
        no_verdict_capped=b.no_verdict_capped,
    )
    if budget.extension is not None:
        message.extension.CopyFrom(extension_to_proto(budget.extension))
    refusal = budget.last_launch_refusal
    if refusal is not None:
        message.last_launch_refusal.CopyFrom(
            budget_pb2.LaunchRefusal(
                run_id=refusal.run_id,
                attempt_key=refusal.attempt_key,
                trigger=_number(*TRIGGER, refusal.trigger),
                no_verdict=refusal.no_verdict,
                reason=refusal.reason,
                refused_at=stamp(refusal.refused_at),
            )
        )
    return message


def counters_to_proto(session_id: str, state: SessionState) -> budget_pb2.SessionCounters:
    return budget_pb2.SessionCounters(
        session_id=session_id,
        turns=state.turns,
        tools=state.tools,
        turn_index=state.turn_index,
        reviews=state.reviews,
        in_flight=state.in_flight,
        enabled=state.enabled,
    )


def decision_to_proto(record: GateRecord) -> budget_pb2.GateDecision:
    message = budget_pb2.GateDecision(
        at=stamp(record.at),
        session=record.session,
        turn=record.turn,
        decision=record.decision,
        source=record.source,
        reason=record.reason,
        tool_calls=record.tool_calls,
        latency_ms=record.latency_ms,
        threshold=record.threshold,
    )
    if record.choice is not None:
        message.choice = record.choice
    if record.confidence is not None:
        message.confidence = record.confidence
    if record.probability is not None:
        message.probability = record.probability
    return message


def _digest(message: budget_pb2.TurnDigest) -> dict[str, Any]:
    return {
        "last_human_message": message.last_human_message,
        "last_assistant_message": message.last_assistant_message,
        "loaded_skills": list(message.loaded_skills),
    }


class DispatchBudgetServicer(budget_pb2_grpc.DispatchBudgetServiceServicer):
    def __init__(self, env: Env) -> None:
        self.db = env.db
        self.gate = env.gate

    async def ConsumeAutoSend(
        self, request: budget_pb2.ConsumeAutoSendRequest, context: Context
    ) -> budget_pb2.ConsumeAutoSendResponse:
        result = await app.consume_auto_send(
            self.db,
            Principal.from_proto(request.principal),
            category_id=request.category_id,
            review_id=request.review_id,
            cap_per_day=request.cap_per_day,
        )
        return budget_pb2.ConsumeAutoSendResponse(
            allowed=result.allowed, used_today=result.used_today, cap_per_day=result.cap_per_day
        )

    async def RecordRun(self, request: budget_pb2.RecordRunRequest, context: Context) -> budget_pb2.Run:
        status = None
        if request.status:
            status = RunStatus(required_enum(*RUN_STATUS, request.status, "/status"))
        run = await app.record_run(
            self.db,
            Principal.from_proto(request.principal),
            run_id=request.run_id,
            repository=request.repository,
            pr_number=request.pr_number,
            head_sha=request.head_sha,
            status=status,
            modes=_modes(
                request.review_mode, request.pr_work_review_mode, request.repeat_review_context_mode
            ),
        )
        return run_to_proto(run)

    async def AdmitReviewRound(
        self, request: budget_pb2.AdmitReviewRoundRequest, context: Context
    ) -> budget_pb2.AdmitReviewRoundResponse:
        principal = Principal.from_proto(request.principal)
        kind = AttemptKind(required_enum(*ATTEMPT_KIND, request.kind, "/kind"))
        trigger = Trigger(required_enum(*TRIGGER, request.trigger, "/trigger"))
        admission = await app.admit_review_round(
            self.db,
            principal,
            run_id=request.run_id,
            attempt_key=request.attempt_key,
            kind=kind,
            trigger=trigger,
            head_sha=request.head_sha,
            selection=selection_to_dict(request.selection) if request.HasField("selection") else {},
            receipt_id=request.receipt_id,
        )
        return budget_pb2.AdmitReviewRoundResponse(
            receipt=receipt_to_proto(admission.receipt),
            reattached=admission.reattached,
            budget=budget_to_proto(admission.budget),
        )

    async def SettleAttempt(
        self, request: budget_pb2.SettleAttemptRequest, context: Context
    ) -> budget_pb2.SettleAttemptResponse:
        receipt, budget = await app.settle_attempt(
            self.db,
            Principal.from_proto(request.principal),
            receipt_id=request.receipt_id,
            verdict=request.verdict,
            reviewed_head=request.reviewed_head,
            no_verdict_reason=request.no_verdict_reason,
            journal_run_id=request.journal_run_id,
        )
        return budget_pb2.SettleAttemptResponse(
            receipt=receipt_to_proto(receipt), budget=budget_to_proto(budget)
        )

    async def GetRoundBudget(
        self, request: budget_pb2.GetRoundBudgetRequest, context: Context
    ) -> budget_pb2.RoundBudget:
        budget = await app.get_round_budget(self.db, Principal.from_proto(request.principal), request.run_id)
        return budget_to_proto(budget)

    async def ExtendReviewBudget(
        self, request: budget_pb2.ExtendReviewBudgetRequest, context: Context
    ) -> budget_pb2.ExtensionReceipt:
        receipt = await app.extend_review_budget(
            self.db,
            Principal.from_proto(request.principal),
            run_id=request.run_id,
            request=ExtensionInput(
                head_sha=request.head_sha,
                new_limit=request.new_limit,
                expected_prior_limit=request.expected_prior_limit,
                scope_brief=request.scope_brief,
                idempotency_key=request.idempotency_key,
            ),
            origin=origin_from_proto(request.origin),
            request_id=request.request_id,
        )
        return extension_to_proto(receipt)

    async def AppendJournalEvents(
        self, request: budget_pb2.AppendJournalEventsRequest, context: Context
    ) -> budget_pb2.AppendJournalEventsResponse:
        events = [_json(raw, f"/events/{index}") for index, raw in enumerate(request.events_json)]
        result = await app.append_journal_events(
            self.db, Principal.from_proto(request.principal), request.run_id, events
        )
        return budget_pb2.AppendJournalEventsResponse(
            appended=result.appended,
            skipped_ephemeral=result.skipped_ephemeral,
            last_offset=result.last_offset,
        )

    async def GetEvidenceStatus(
        self, request: budget_pb2.GetEvidenceStatusRequest, context: Context
    ) -> budget_pb2.GetEvidenceStatusResponse:
        evidence = await app.get_evidence_status(
            self.db, Principal.from_proto(request.principal), request.run_id
        )
        return budget_pb2.GetEvidenceStatusResponse(
            evidence=evidence.status.value,
            offset=evidence.offset,
            schema_version=evidence.schema_version,
            evidence_rejected_json=orjson.dumps(evidence.rejected).decode() if evidence.rejected else "",
        )

    async def RegisterRunner(
        self, request: budget_pb2.RegisterRunnerRequest, context: Context
    ) -> budget_pb2.Runner:
        spec = await app.register_runner(
            self.db, Principal.from_proto(request.principal), runner_from_proto(request.runner)
        )
        return runner_to_proto(spec)

    async def ListRunners(
        self, request: budget_pb2.ListRunnersRequest, context: Context
    ) -> budget_pb2.ListRunnersResponse:
        runners = await app.list_runners(self.db, Principal.from_proto(request.principal))
        return budget_pb2.ListRunnersResponse(runners=[runner_to_proto(r) for r in runners])

    async def SetReviewConfig(
        self, request: budget_pb2.SetReviewConfigRequest, context: Context
    ) -> budget_pb2.ReviewConfig:
        config = _json_object(request.config_json, "/config")
        return review_config_to_proto(
            *await app.set_review_config(self.db, Principal.from_proto(request.principal), config)
        )

    async def GetReviewConfig(
        self, request: budget_pb2.GetReviewConfigRequest, context: Context
    ) -> budget_pb2.ReviewConfig:
        return review_config_to_proto(
            *await app.get_review_config(self.db, Principal.from_proto(request.principal))
        )

    async def ValidateSequence(
        self, request: budget_pb2.ValidateSequenceRequest, context: Context
    ) -> budget_pb2.ValidateSequenceResponse:
        rows = _json(request.sequence_json, "/sequence")
        selections, payload = await app.validate_review_sequence(
            self.db, Principal.from_proto(request.principal), rows
        )
        return budget_pb2.ValidateSequenceResponse(
            rows=[selection_to_proto(s.to_json()) for s in selections],
            request_review_json=orjson.dumps(payload).decode(),
        )

    async def ResolveReviewMode(
        self, request: budget_pb2.ResolveReviewModeRequest, context: Context
    ) -> budget_pb2.ResolveReviewModeResponse:
        config = (
            _json_object(request.project_config_json, "/project_config")
            if request.project_config_json
            else None
        )
        mode, source = await app.resolve_mode(
            self.db,
            Principal.from_proto(request.principal),
            run_id=request.run_id,
            explicit=_mode(request.explicit_mode),
            given=_modes(
                request.run_review_mode, request.pr_work_options_mode, request.repeat_review_context_mode
            ),
            project_default=_mode(request.project_default),
            project_config=config,
        )
        return budget_pb2.ResolveReviewModeResponse(mode=_mode_number(mode), source=source)

    async def BindReviewSession(
        self, request: budget_pb2.BindReviewSessionRequest, context: Context
    ) -> budget_pb2.ReviewSessionBinding:
        binding = await app.bind_review_session(
            self.db,
            Principal.from_proto(request.principal),
            repository=request.repository,
            pr_number=request.pr_number,
            selection=selection_to_dict(request.selection),
            base_sha=request.base_sha,
            head_sha=request.head_sha,
            review_id=request.review_id,
            new_review_id=request.new_review_id,
        )
        return binding_to_proto(binding)

    async def CompleteReviewSession(
        self, request: budget_pb2.CompleteReviewSessionRequest, context: Context
    ) -> budget_pb2.ReviewSessionBinding:
        binding = await app.complete_review_session(
            self.db, Principal.from_proto(request.principal), request.session_id, request.reviewed_head
        )
        return binding_to_proto(binding)

    async def RecordTurn(
        self, request: budget_pb2.RecordTurnRequest, context: Context
    ) -> budget_pb2.RecordTurnResponse:
        status = enum_name(*TURN_STATUS, request.status)
        if not status:
            raise invalid("/status", "completed, aborted or failed")
        result = await app.record_turn(
            self.db,
            self.gate,
            Principal.from_proto(request.principal),
            session_id=request.session_id,
            origin=request.origin,
            depth=request.depth,
            status=status,
            tool_calls=request.tool_calls,
            digest=_digest(request.digest),
        )
        reply = budget_pb2.RecordTurnResponse(
            counters=counters_to_proto(request.session_id, result.counters),
            counted=result.counted,
            not_due_reason=result.not_due_reason or "",
        )
        if result.decision is not None:
            reply.decision.CopyFrom(decision_to_proto(result.decision))
        return reply

    async def DecideReview(
        self, request: budget_pb2.DecideReviewRequest, context: Context
    ) -> budget_pb2.DecideReviewResponse:
        result = await app.decide_review(
            self.db,
            self.gate,
            Principal.from_proto(request.principal),
            session_id=request.session_id,
            review_now=request.now,
            digest=_digest(request.digest),
        )
        reply = budget_pb2.DecideReviewResponse(
            counters=counters_to_proto(request.session_id, result.counters),
            not_due_reason=result.not_due_reason or "",
        )
        if result.decision is not None:
            reply.decision.CopyFrom(decision_to_proto(result.decision))
        return reply

    async def SetReviewEnabled(
        self, request: budget_pb2.SetReviewEnabledRequest, context: Context
    ) -> budget_pb2.SetReviewEnabledResponse:
        state = await app.set_review_enabled(
            self.db, Principal.from_proto(request.principal), request.session_id, request.enabled
        )
        return budget_pb2.SetReviewEnabledResponse(counters=counters_to_proto(request.session_id, state))

    async def FinishReview(
        self, request: budget_pb2.FinishReviewRequest, context: Context
    ) -> budget_pb2.SessionCounters:
        state = await app.finish_review(
            self.db, Principal.from_proto(request.principal), request.session_id, request.succeeded
        )
        return counters_to_proto(request.session_id, state)

    async def ListGateDecisions(
        self, request: budget_pb2.ListGateDecisionsRequest, context: Context
    ) -> budget_pb2.ListGateDecisionsResponse:
        records, cursor = await app.list_gate_decisions(
            self.db,
            Principal.from_proto(request.principal),
            session_id=request.session_id,
            cursor=request.cursor,
            limit=request.limit or 100,
        )
        return budget_pb2.ListGateDecisionsResponse(
            decisions=[decision_to_proto(r) for r in records], next_cursor=cursor
        )


def registrations(env: Env) -> Sequence[Registration]:
    return [
        (
            budget_pb2_grpc.add_DispatchBudgetServiceServicer_to_server,
            DispatchBudgetServicer(env),
            "reviewloop.budget.v1.DispatchBudgetService",
        )
    ]
