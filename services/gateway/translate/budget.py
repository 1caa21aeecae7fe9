"""The dispatch_budget service's messages as the budget shapes (spec 003's receipts and budgets, spec 002's
evidence, spec 001's gate decisions), and the review selection and modes as protobuf."""

from __future__ import annotations

from typing import Any

import orjson
from reviewloop.budget.v1 import budget_pb2
from reviewloop.common.v1 import common_pb2
from reviewloop.shapes import DigestIn, Mode, SelectionIn

from gateway.translate import Json, enum_name, present, timestamp


def mode_name(value: int) -> str:
    return enum_name(budget_pb2.ReviewMode, value, "REVIEW_MODE_")


def _trigger(value: int) -> str:
    return enum_name(budget_pb2.LaunchTrigger, value, "LAUNCH_TRIGGER_")


# --- review rounds (spec 003) ---------------------------------------------------------------------


def as_selection(message: budget_pb2.ReviewSelection) -> Json:
    return {
        "runner": message.runner,
        "model": message.model,
        "effort": message.effort,
        "mode": mode_name(message.mode),
    }


def as_review_run(message: budget_pb2.Run) -> Json:
    body: Json = {
        "run_id": message.run_id,
        "status": enum_name(budget_pb2.RunStatus, message.status, "RUN_STATUS_"),
        "scope_key": message.scope_key,
    }
    body.update(present(message, "repository", "pr_number", "head_sha"))
    for field in ("review_mode", "pr_work_review_mode", "repeat_review_context_mode"):
        if getattr(message, field):
            body[field] = mode_name(getattr(message, field))
    if message.review_sequence:
        body["review_sequence"] = [as_selection(row) for row in message.review_sequence]
    if message.created_by:
        body["created_by"] = message.created_by
    return body


def as_extension_receipt(message: budget_pb2.ExtensionReceipt) -> Json:
    origin: Json = {
        "actor_kind": enum_name(common_pb2.ActorKind, message.origin.actor_kind, "ACTOR_KIND_"),
        "actor_id": message.origin.actor_id,
    }
    for name in ("key_id", "remote_addr", "user_agent"):
        if getattr(message.origin, name):
            origin[name] = getattr(message.origin, name)
    body: Json = {
        "receipt_id": message.receipt_id,
        "request_id": message.idempotency_key,
        "run_id": message.run_id,
        "scope_key": message.scope_key,
        "approved_head": message.approved_head,
        "prior_limit": message.prior_limit,
        "new_limit": message.new_limit,
        "scope_brief": message.scope_brief,
        "origin": origin,
        "granted_at": timestamp(message.granted_at),
    }
    body.update(present(message, "repository", "pr_number"))
    return body


def as_round_budget(message: budget_pb2.RoundBudget) -> Json:
    body: Json = {
        "scope_key": message.scope_key,
        "used": message.used,
        "limit": message.limit,
        "admissions": message.admissions,
        "no_verdict": message.no_verdict,
        "no_verdict_limit": message.no_verdict_limit,
        "label": message.label,
        "exhausted": message.exhausted,
        "no_verdict_capped": message.no_verdict_capped,
    }
    if message.HasField("extension"):
        body["extension"] = as_extension_receipt(message.extension)
    if message.HasField("last_launch_refusal"):
        refusal = message.last_launch_refusal
        body["last_launch_refusal"] = {
            "run_id": refusal.run_id,
            "attempt_key": refusal.attempt_key,
            "trigger": _trigger(refusal.trigger),
            "no_verdict": refusal.no_verdict,
            "reason": refusal.reason,
            "refused_at": timestamp(refusal.refused_at),
        }
    return body


def as_admission_receipt(message: budget_pb2.AdmissionReceipt) -> Json:
    body: Json = {
        "receipt_id": message.receipt_id,
        "run_id": message.run_id,
        "scope_key": message.scope_key,
        "attempt_key": message.attempt_key,
        "kind": enum_name(budget_pb2.AttemptKind, message.kind, "ATTEMPT_KIND_"),
        "trigger": _trigger(message.trigger),
        "head_sha": message.head_sha,
        "round": message.round,
        "admitted_at": timestamp(message.admitted_at),
    }
    if message.selection.runner:
        body["selection"] = as_selection(message.selection)
    if message.admitted_by:
        body["admitted_by"] = message.admitted_by
    if message.HasField("settlement"):
        s = message.settlement
        settlement: Json = {
            "outcome": enum_name(budget_pb2.SettlementOutcome, s.outcome, "SETTLEMENT_OUTCOME_"),
            "settled_at": timestamp(s.settled_at),
        }
        settlement.update(present(s, "reason", "verdict", "evidence", "reviewed_head", "journal_run_id"))
        if s.diff_scope_json:
            settlement["diff_scope"] = orjson.loads(s.diff_scope_json)
        body["settlement"] = settlement
    return body


# --- the selection catalog, sequences, mode, lineage (spec 003) -----------------------------------


def as_runner(message: budget_pb2.Runner) -> Json:
    return {
        "name": message.name,
        "models": list(message.models),
        "efforts": list(message.efforts),
        "default_model": message.default_model,
        "default_effort": message.default_effort,
        "supports_warm": message.supports_warm,
        "supports_model_change": message.supports_model_change,
    }


def as_review_config(message: budget_pb2.ReviewConfig) -> Json:
    body: Json = {"config": orjson.loads(message.config_json)}
    if message.mode:
        body["mode"] = mode_name(message.mode)
    return body


def as_review_session_binding(message: budget_pb2.ReviewSessionBinding) -> Json:
    return {
        "review_id": message.review_id,
        "session_id": message.session_id,
        "mode": mode_name(message.mode),
        "range": {"base": message.range_base, "head": message.range_head},
        "fresh_session": message.fresh_session,
        "selection": as_selection(message.selection),
        "busy": message.busy,
        "lease_id": message.lease_id or None,
        "lease_expires_at": timestamp(message.lease_expires_at)
        if message.HasField("lease_expires_at")
        else None,
    }


def as_ready_gate(message: budget_pb2.ReadyGate) -> Json:
    return {
        "run_id": message.run_id,
        "head_sha": message.head_sha,
        "review_round_budget": as_round_budget(message.review_round_budget),
        "qualifying_reviews": message.qualifying_reviews,
        "required_reviews": message.required_reviews,
        "publishable": message.publishable,
        "blockers": list(message.blockers),
        "filled_rows": [_gate_row(r) for r in message.filled_rows],
        "remaining_rows": [_gate_row(r) for r in message.remaining_rows],
        "refused_reviews": [
            {"receipt_id": r.receipt_id, "reason": r.reason} for r in message.refused_reviews
        ],
    }


def _gate_row(message: budget_pb2.GateRow) -> Json:
    body: Json = {"row": message.row}
    if message.HasField("selection"):
        body["selection"] = as_selection(message.selection)
    if message.receipt_id:
        body["receipt_id"] = message.receipt_id
        body["review_session_id"] = message.review_session_id
    return body


# --- the review-run gate (spec 001) ---------------------------------------------------------------


def as_gate_decision(message: budget_pb2.GateDecision, spec_keys: bool = False) -> Json:
    """``GateDecision``; ``spec_keys`` gives the gates.jsonl record exactly as spec 001 spells it."""
    tool_calls, latency = ("toolCalls", "latencyMs") if spec_keys else ("tool_calls", "latency_ms")
    body: Json = {
        "at": timestamp(message.at),
        "session": message.session,
        "turn": message.turn,
        "decision": message.decision,
        "source": message.source,
        "reason": message.reason,
    }
    for name in ("choice", "confidence", "probability"):
        if message.HasField(name):
            body[name] = getattr(message, name)
    body.update({tool_calls: message.tool_calls, latency: message.latency_ms, "threshold": message.threshold})
    return body


def as_turn_result(reply: budget_pb2.RecordTurnResponse) -> Json:
    c = reply.counters
    body: Json = {
        "counters": {
            "turns": c.turns,
            "tools": c.tools,
            "turn_index": c.turn_index,
            "reviews": c.reviews,
            "in_flight": c.in_flight,
            "enabled": c.enabled,
        },
        "counted": reply.counted,
    }
    if reply.HasField("decision"):
        body["decision"] = as_gate_decision(reply.decision)
    if reply.not_due_reason:
        body["not_due_reason"] = reply.not_due_reason
    return body


# --- JSON to protobuf -----------------------------------------------------------------------------


def selection(body: SelectionIn) -> budget_pb2.ReviewSelection:
    return budget_pb2.ReviewSelection(
        runner=body.runner,
        model=body.model,
        effort=body.effort,
        mode=budget_pb2.ReviewMode.Value(f"REVIEW_MODE_{body.mode.value.upper()}"),
    )


def mode(value: Mode | None) -> Any:
    if value is None:
        return budget_pb2.REVIEW_MODE_UNSPECIFIED
    return budget_pb2.ReviewMode.Value(f"REVIEW_MODE_{value.value.upper()}")


def digest(body: DigestIn) -> budget_pb2.TurnDigest:
    return budget_pb2.TurnDigest(**body.model_dump())
