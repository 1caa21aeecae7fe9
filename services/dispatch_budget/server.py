"""The DispatchBudgetService servicer: translate protobuf to domain types (``messages``), call
``app``, translate back. Authorization and every rule live in the use cases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc
import orjson
from reviewloop import service
from reviewloop.budget.v1 import budget_pb2, budget_pb2_grpc
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import invalid
from reviewloop.protoconv import enum_name, required_enum
from reviewloop.records import from_row
from reviewloop.service import Registration
from reviewloop.tenancy import Principal

from dispatch_budget import app
from dispatch_budget.bootstrap import Env
from dispatch_budget.domain.budget import AttemptKind, ExtensionInput, RunStatus, Trigger
from dispatch_budget.domain.gate import GateRecord, Turn
from dispatch_budget.domain.lineage import BindRequest
from dispatch_budget.domain.rounds import AdmissionRequest, RunSnapshot
from dispatch_budget.messages import (
    ATTEMPT_KIND,
    RUN_STATUS,
    TRIGGER,
    TURN_STATUS,
    binding_to_proto,
    budget_to_proto,
    counters_to_proto,
    decision_to_proto,
    digest_from_proto,
    extension_to_proto,
    gate_config_to_proto,
    json_object,
    json_value,
    mode_from_proto,
    mode_number,
    modes_from_proto,
    origin_from_proto,
    ready_gate_to_proto,
    receipt_to_proto,
    review_config_to_proto,
    run_to_proto,
    runner_from_proto,
    runner_to_proto,
    selection_to_dict,
    selection_to_proto,
)

if TYPE_CHECKING:
    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


class DispatchBudgetServicer(budget_pb2_grpc.DispatchBudgetServiceServicer):
    def __init__(self, env: Env) -> None:
        self.db = env.db
        self.gate = env.gate
        self.lease = env.settings.lease
        self.pools = env.settings.pool_budgets
        self.pool_subscriptions = app.pool_subscriptions(self.pools)

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

    async def ConsumePoolSend(
        self, request: budget_pb2.ConsumePoolSendRequest, context: Context
    ) -> budget_pb2.PoolSendReceipt:
        result = await app.consume_pool_send(
            self.db,
            self.pools,
            Principal.from_proto(request.principal),
            sender=request.sender,
            review_id=request.review_id,
        )
        return _pool_receipt(result)

    async def SettlePoolSend(
        self, request: budget_pb2.SettlePoolSendRequest, context: Context
    ) -> budget_pb2.PoolSendReceipt:
        outcome = app.OUTCOMES.get(request.outcome)
        if outcome is None:
            raise invalid("/outcome", "sent, not_sent or unknown")
        result = await app.settle_pool_send(
            self.db,
            self.pools,
            Principal.from_proto(request.principal),
            review_id=request.review_id,
            outcome=outcome,
        )
        return _pool_receipt(result)

    async def Ingest(self, request: common_pb2.IngestRequest, context: Context) -> common_pb2.IngestResponse:
        """review_state's pool settlements, each handled once (deduplicated on event_id)."""
        return await service.ingest(self.db, request, self.pool_subscriptions)

    async def ListSendPools(
        self, request: budget_pb2.ListSendPoolsRequest, context: Context
    ) -> budget_pb2.ListSendPoolsResponse:
        today = await app.list_send_pools(self.db, self.pools, Principal.from_proto(request.principal))
        return budget_pb2.ListSendPoolsResponse(
            pools=[
                budget_pb2.SendPool(
                    pool=row.pool,
                    day=today.day,
                    used=row.used,
                    budget_per_day=budget,
                    refunded=row.refunded,
                    kept=row.kept,
                )
                for row, budget in today.pools
            ],
            default_budget_per_day=today.default_budget,
        )

    async def RecordRun(self, request: budget_pb2.RecordRunRequest, context: Context) -> budget_pb2.Run:
        status = None
        if request.status:
            status = RunStatus(required_enum(*RUN_STATUS, request.status, "/status"))
        snapshot = RunSnapshot(
            request.run_id,
            request.repository,
            request.pr_number,
            request.head_sha,
            status,
            modes_from_proto(
                request.review_mode, request.pr_work_review_mode, request.repeat_review_context_mode
            ),
            tuple(selection_to_dict(row) for row in request.review_sequence),
        )
        run = await app.record_run(self.db, Principal.from_proto(request.principal), snapshot)
        return run_to_proto(run)

    async def GetRun(self, request: budget_pb2.GetRunRequest, context: Context) -> budget_pb2.Run:
        return run_to_proto(
            await app.get_run(self.db, Principal.from_proto(request.principal), request.run_id)
        )

    async def AdmitReviewRound(
        self, request: budget_pb2.AdmitReviewRoundRequest, context: Context
    ) -> budget_pb2.AdmitReviewRoundResponse:
        attempt = AdmissionRequest(
            request.run_id,
            request.attempt_key,
            AttemptKind(required_enum(*ATTEMPT_KIND, request.kind, "/kind")),
            Trigger(required_enum(*TRIGGER, request.trigger, "/trigger")),
            request.head_sha,
            selection_to_dict(request.selection) if request.HasField("selection") else {},
            request.receipt_id,
            request.session_id,
            request.review_session_id,
        )
        admission = await app.admit_review_round(self.db, Principal.from_proto(request.principal), attempt)
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
            diff_scope=orjson.loads(request.diff_scope_json) if request.diff_scope_json else None,
        )
        return budget_pb2.SettleAttemptResponse(
            receipt=receipt_to_proto(receipt), budget=budget_to_proto(budget)
        )

    async def GetRoundBudget(
        self, request: budget_pb2.GetRoundBudgetRequest, context: Context
    ) -> budget_pb2.RoundBudget:
        budget = await app.get_round_budget(self.db, Principal.from_proto(request.principal), request.run_id)
        return budget_to_proto(budget)

    async def GetReadyGate(
        self, request: budget_pb2.GetReadyGateRequest, context: Context
    ) -> budget_pb2.ReadyGate:
        gate = await app.get_ready_gate(self.db, Principal.from_proto(request.principal), request.run_id)
        return ready_gate_to_proto(gate)

    async def ExtendReviewBudget(
        self, request: budget_pb2.ExtendReviewBudgetRequest, context: Context
    ) -> budget_pb2.ExtensionReceipt:
        receipt = await app.extend_review_budget(
            self.db,
            Principal.from_proto(request.principal),
            run_id=request.run_id,
            # Each of ExtensionInput's fields is the request's field of its name.
            request=from_row(ExtensionInput, request),
            origin=origin_from_proto(request.origin),
            request_id=request.request_id,
        )
        return extension_to_proto(receipt)

    async def AppendJournalEvents(
        self, request: budget_pb2.AppendJournalEventsRequest, context: Context
    ) -> budget_pb2.AppendJournalEventsResponse:
        events = [json_value(raw, f"/events/{index}") for index, raw in enumerate(request.events_json)]
        result = await app.append_journal_events(
            self.db, Principal.from_proto(request.principal), request.run_id, events, request.events_json
        )
        return budget_pb2.AppendJournalEventsResponse(
            appended=result.appended,
            skipped_ephemeral=result.skipped_ephemeral,
            last_offset=result.last_offset,
            already_journaled=result.already_journaled,
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

    async def ReadJournalEvents(
        self, request: budget_pb2.ReadJournalEventsRequest, context: Context
    ) -> budget_pb2.ReadJournalEventsResponse:
        page = await app.read_journal_lines(
            self.db,
            Principal.from_proto(request.principal),
            request.run_id,
            after=request.after_offset,
            limit=request.limit,
        )
        return budget_pb2.ReadJournalEventsResponse(
            lines=page.lines, last_offset=page.last_offset, more=page.more, reencoded_offsets=page.reencoded
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
        config = json_object(request.config_json, "/config")
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
        rows = json_value(request.sequence_json, "/sequence")
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
            json_object(request.project_config_json, "/project_config")
            if request.project_config_json
            else None
        )
        mode, source = await app.resolve_mode(
            self.db,
            Principal.from_proto(request.principal),
            run_id=request.run_id,
            explicit=mode_from_proto(request.explicit_mode),
            given=modes_from_proto(
                request.run_review_mode, request.pr_work_options_mode, request.repeat_review_context_mode
            ),
            project_default=mode_from_proto(request.project_default),
            project_config=config,
        )
        return budget_pb2.ResolveReviewModeResponse(mode=mode_number(mode), source=source)

    async def BindReviewSession(
        self, request: budget_pb2.BindReviewSessionRequest, context: Context
    ) -> budget_pb2.ReviewSessionBinding:
        bind = BindRequest(
            request.repository,
            request.pr_number,
            request.base_sha,
            request.head_sha,
            request.review_id,
            request.new_review_id,
        )
        binding = await app.bind_review_session(
            self.db,
            Principal.from_proto(request.principal),
            bind,
            selection_to_dict(request.selection),
            self.lease,
        )
        return binding_to_proto(binding)

    async def CompleteReviewSession(
        self, request: budget_pb2.CompleteReviewSessionRequest, context: Context
    ) -> budget_pb2.ReviewSessionBinding:
        binding = await app.complete_review_session(
            self.db,
            Principal.from_proto(request.principal),
            request.session_id,
            request.reviewed_head,
            request.lease_id,
        )
        return binding_to_proto(binding)

    async def HeartbeatReviewSession(
        self, request: budget_pb2.HeartbeatReviewSessionRequest, context: Context
    ) -> budget_pb2.ReviewSessionBinding:
        binding = await app.heartbeat_review_session(
            self.db, Principal.from_proto(request.principal), request.session_id, request.lease_id, self.lease
        )
        return binding_to_proto(binding)

    async def SetGateConfig(
        self, request: budget_pb2.SetGateConfigRequest, context: Context
    ) -> budget_pb2.GateConfig:
        overrides, effective = await app.set_gate_config(
            self.db,
            self.gate,
            Principal.from_proto(request.principal),
            json_object(request.overrides_json, "/"),
        )
        return gate_config_to_proto(overrides, effective)

    async def GetGateConfig(
        self, request: budget_pb2.GetGateConfigRequest, context: Context
    ) -> budget_pb2.GateConfig:
        overrides, effective = await app.get_gate_config(
            self.db, self.gate, Principal.from_proto(request.principal)
        )
        return gate_config_to_proto(overrides, effective)

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
            request.session_id,
            Turn(request.origin, request.depth, status, request.tool_calls),
            digest_from_proto(request.digest),
        )
        return budget_pb2.RecordTurnResponse(
            counters=counters_to_proto(request.session_id, result.counters),
            counted=result.counted,
            not_due_reason=result.not_due_reason or "",
            decision=_decision(result.decision),
        )

    async def DecideReview(
        self, request: budget_pb2.DecideReviewRequest, context: Context
    ) -> budget_pb2.DecideReviewResponse:
        result = await app.decide_review(
            self.db,
            self.gate,
            Principal.from_proto(request.principal),
            session_id=request.session_id,
            review_now=request.now,
            digest=digest_from_proto(request.digest),
        )
        return budget_pb2.DecideReviewResponse(
            counters=counters_to_proto(request.session_id, result.counters),
            not_due_reason=result.not_due_reason or "",
            decision=_decision(result.decision),
        )

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
            self.db,
            Principal.from_proto(request.principal),
            request.session_id,
            request.succeeded,
            request.receipt_id,
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


def _pool_receipt(result: app.PoolSend) -> budget_pb2.PoolSendReceipt:
    return budget_pb2.PoolSendReceipt(
        allowed=result.allowed,
        receipt_id=result.receipt_id,
        pool=result.pool,
        used_today=result.used_today,
        budget_per_day=result.budget_per_day,
        status=result.status,
    )


def _decision(record: GateRecord | None) -> budget_pb2.GateDecision | None:
    """The turn's review decision, when one was made (unset otherwise)."""
    return decision_to_proto(record) if record is not None else None
