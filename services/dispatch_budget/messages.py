"""Translations between the budget protobuf messages and dispatch_budget's domain records: what the
servicer hands the use cases and what it answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson
from reviewloop.budget.v1 import budget_pb2
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import invalid
from reviewloop.protoconv import enum_name, from_enum, stamp, to_enum
from reviewloop.review_dispatch.selection import ReviewMode, RunnerSpec

from dispatch_budget.domain.gate import GateConfig, GateRecord, SessionState, gate_settings
from dispatch_budget.domain.lineage import Binding
from dispatch_budget.domain.qualifying import Row
from dispatch_budget.domain.rounds import (
    Budget,
    ExtensionReceipt,
    Origin,
    ReadyGate,
    Receipt,
    Run,
    RunModes,
)

if TYPE_CHECKING:
    from google.protobuf.internal.enum_type_wrapper import _EnumTypeWrapper

V = TypeVar("V", bound=int)


def enum_number(enum: _EnumTypeWrapper[V], prefix: str, name: str) -> V:
    """``protoconv.to_enum``, typed as the generated enum's own value type."""
    return cast(V, to_enum(enum, prefix, name))


MODE = (budget_pb2.ReviewMode, "REVIEW_MODE_")
RUN_STATUS = (budget_pb2.RunStatus, "RUN_STATUS_")
ATTEMPT_KIND = (budget_pb2.AttemptKind, "ATTEMPT_KIND_")
TRIGGER = (budget_pb2.LaunchTrigger, "LAUNCH_TRIGGER_")
OUTCOME = (budget_pb2.SettlementOutcome, "SETTLEMENT_OUTCOME_")
TURN_STATUS = (budget_pb2.TurnStatus, "TURN_STATUS_")
ACTOR_KIND = (common_pb2.ActorKind, "ACTOR_KIND_")


def mode_from_proto(number: int) -> ReviewMode | None:
    return from_enum(ReviewMode, *MODE, number)


def mode_number(mode: ReviewMode | None) -> budget_pb2.ReviewMode.ValueType:
    return enum_number(*MODE, mode.value) if mode else budget_pb2.REVIEW_MODE_UNSPECIFIED


def modes_from_proto(review: int, pr_work: int, repeat_context: int) -> RunModes:
    return RunModes(mode_from_proto(review), mode_from_proto(pr_work), mode_from_proto(repeat_context))


def json_object(text: str, field: str) -> dict[str, Any]:
    try:
        config = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise invalid(field, "not valid JSON") from None
    if not isinstance(config, dict):
        raise invalid(field, "must be a JSON object")
    return config


def json_value(text: str, field: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise invalid(field, "not valid JSON") from None


def review_config_to_proto(config: dict[str, Any], mode: ReviewMode | None) -> budget_pb2.ReviewConfig:
    return budget_pb2.ReviewConfig(config_json=orjson.dumps(config).decode(), mode=mode_number(mode))


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
        mode=mode_number(binding.mode),
        range_base=binding.range_base,
        range_head=binding.range_head,
        fresh_session=binding.fresh_session,
        selection=selection_to_proto(binding.selection.to_json()),
        busy=binding.busy,
        lease_id=binding.lease_id,
        lease_expires_at=stamp(binding.lease_expires_at) if binding.lease_expires_at else None,
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
        mode=enum_number(*MODE, mode) if mode else budget_pb2.REVIEW_MODE_UNSPECIFIED,
    )


def run_to_proto(run: Run) -> budget_pb2.Run:
    return budget_pb2.Run(
        run_id=run.run_id,
        repository=run.repository,
        pr_number=run.pr_number,
        head_sha=run.head_sha,
        status=enum_number(*RUN_STATUS, run.status),
        scope_key=run.scope_key,
        review_mode=mode_number(run.modes.review),
        pr_work_review_mode=mode_number(run.modes.pr_work),
        repeat_review_context_mode=mode_number(run.modes.repeat_context),
        review_sequence=[selection_to_proto(row) for row in run.review_sequence],
        created_by=run.owner,
    )


def receipt_to_proto(receipt: Receipt) -> budget_pb2.AdmissionReceipt:
    message = budget_pb2.AdmissionReceipt(
        receipt_id=receipt.receipt_id,
        run_id=receipt.run_id,
        scope_key=receipt.scope_key,
        attempt_key=receipt.attempt_key,
        kind=enum_number(*ATTEMPT_KIND, receipt.kind),
        trigger=enum_number(*TRIGGER, receipt.trigger),
        head_sha=receipt.head_sha,
        selection=selection_to_proto(receipt.selection),
        admitted_at=stamp(receipt.admitted_at),
        round=receipt.round,
        admitted_by=receipt.admitted_by,
    )
    if receipt.outcome is not None:
        settlement = message.settlement
        settlement.outcome = enum_number(*OUTCOME, receipt.outcome)
        settlement.reason = receipt.reason or ""
        settlement.verdict = receipt.verdict or ""
        settlement.evidence = receipt.evidence or ""
        settlement.reviewed_head = receipt.reviewed_head or ""
        settlement.journal_run_id = receipt.journal_run_id
        if receipt.diff_scope is not None:
            settlement.diff_scope_json = orjson.dumps(receipt.diff_scope).decode()
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
            actor_kind=enum_number(*ACTOR_KIND, origin.actor_kind),
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


def ready_gate_to_proto(gate: ReadyGate) -> budget_pb2.ReadyGate:
    rows = {r.index: r for r in gate.tally.rows}
    return budget_pb2.ReadyGate(
        run_id=gate.run.run_id,
        scope_key=gate.run.scope_key,
        head_sha=gate.run.head_sha,
        review_round_budget=budget_to_proto(gate.budget),
        qualifying_reviews=gate.qualifying,
        required_reviews=gate.required,
        publishable=gate.publishable,
        blockers=gate.blockers,
        filled_rows=[
            budget_pb2.GateRow(
                row=f.row,
                selection=_row_selection(rows.get(f.row)),
                receipt_id=f.receipt_id,
                review_session_id=f.review_session_id,
            )
            for f in gate.tally.filled
        ],
        remaining_rows=[budget_pb2.GateRow(row=r.index, selection=_row_selection(r)) for r in gate.remaining],
        refused_reviews=[
            budget_pb2.RefusedReview(receipt_id=r.receipt_id, reason=r.reason) for r in gate.refused
        ],
    )


def _row_selection(row: Row | None) -> budget_pb2.ReviewSelection | None:
    if row is None or row.free:
        return None
    return selection_to_proto(
        {"runner": row.runner, "model": row.model, "effort": row.effort, "mode": row.mode}
    )


def gate_config_to_proto(overrides: dict[str, Any], effective: GateConfig) -> budget_pb2.GateConfig:
    return budget_pb2.GateConfig(
        overrides_json=orjson.dumps(overrides).decode(),
        effective_json=orjson.dumps(gate_settings(effective)).decode(),
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
                trigger=enum_number(*TRIGGER, refusal.trigger),
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


def digest_from_proto(message: budget_pb2.TurnDigest) -> dict[str, Any]:
    return {
        "last_human_message": message.last_human_message,
        "last_assistant_message": message.last_assistant_message,
        "loaded_skills": list(message.loaded_skills),
    }
