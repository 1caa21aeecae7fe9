"""Review rounds (spec 003): a run's record, admissions and their settlement, the round budget, and a
project admin's scoped extension of it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from reviewloop.budget.v1 import budget_pb2
from reviewloop.shapes import (
    AdmissionResult,
    AdmitIn,
    ExtendIn,
    ExtensionReceipt,
    ReadyGate,
    ReviewRun,
    RoundBudget,
    RunIn,
    SettleIn,
    SettlementResult,
)
from reviewloop.tenancy import ActorKind, Principal

from gateway.auth import require
from gateway.backends import Backends, backends
from gateway.commands import budget
from gateway.headers import IdempotencyKey
from gateway.responses import ShapedRoute
from gateway.routes.budget import Caller
from gateway.translate import Json
from gateway.translate.budget import (
    as_admission_receipt,
    as_extension_receipt,
    as_ready_gate,
    as_review_run,
    as_round_budget,
    selection,
)

router = APIRouter(tags=["dispatch budget"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
AdminKey = Annotated[Principal, Depends(require(ActorKind.ADMIN))]


@router.put("/v1/review-rounds/runs/{run_id}", operation_id="record_review_run", response_model=ReviewRun)
async def record_review_run(run_id: str, body: RunIn, principal: Caller, backend: Backend) -> Json:
    return as_review_run(await budget.record_run(backend, principal, run_id, body))


@router.get("/v1/review-rounds/runs/{run_id}", operation_id="get_review_run", response_model=ReviewRun)
async def get_review_run(run_id: str, principal: Caller, backend: Backend) -> Json:
    """The run as recorded, its review sequence included (what a picker saved reads back here)."""
    return as_review_run(await budget.get_run(backend, principal, run_id))


@router.post(
    "/v1/review-rounds/admissions",
    status_code=201,
    operation_id="admit_review_round",
    response_model=AdmissionResult,
)
async def admit_review_round(body: AdmitIn, principal: Caller, backend: Backend) -> Json:
    request = budget_pb2.AdmitReviewRoundRequest(
        principal=principal.to_proto(),
        run_id=body.run_id,
        attempt_key=body.attempt_key,
        kind=budget_pb2.AttemptKind.Value(f"ATTEMPT_KIND_{body.kind.upper()}"),
        trigger=budget_pb2.LaunchTrigger.Value(f"LAUNCH_TRIGGER_{body.trigger.upper()}"),
        head_sha=body.head_sha,
        receipt_id=body.receipt_id,
        session_id=body.session_id,
        review_session_id=body.review_session_id,
    )
    if body.selection is not None:
        request.selection.CopyFrom(selection(body.selection))
    reply = await backend.budget.AdmitReviewRound(request, timeout=backend.timeout_s)
    return {
        "receipt": as_admission_receipt(reply.receipt),
        "reattached": reply.reattached,
        "review_round_budget": as_round_budget(reply.budget),
    }


@router.post(
    "/v1/review-rounds/admissions/{receipt_id}/settlement",
    operation_id="settle_review_attempt",
    response_model=SettlementResult,
)
async def settle_review_attempt(receipt_id: str, body: SettleIn, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.SettleAttempt(
        budget_pb2.SettleAttemptRequest(
            principal=principal.to_proto(),
            receipt_id=receipt_id,
            verdict=body.verdict or "",
            reviewed_head=body.reviewed_head,
            no_verdict_reason=body.no_verdict_reason,
            journal_run_id=body.journal_run_id,
            diff_scope_json=body.diff_scope.model_dump_json() if body.diff_scope is not None else "",
        ),
        timeout=backend.timeout_s,
    )
    return {
        "receipt": as_admission_receipt(reply.receipt),
        "review_round_budget": as_round_budget(reply.budget),
    }


@router.get("/v1/review-rounds/budget", operation_id="get_review_round_budget", response_model=RoundBudget)
async def get_review_round_budget(
    principal: Caller, backend: Backend, run_id: Annotated[str, Query(min_length=1, max_length=80)]
) -> Json:
    return as_round_budget(await budget.round_budget(backend, principal, run_id))


@router.get("/v1/review-rounds/ready-gate", operation_id="get_ready_gate", response_model=ReadyGate)
async def get_ready_gate(
    principal: Caller, backend: Backend, run_id: Annotated[str, Query(min_length=1, max_length=80)]
) -> Json:
    """The ready-gate payload a publication gate reads: the round budget's display snapshot, the
    extension's scope and provenance, qualifying reviews of the current head vs required. A spent
    round budget never blocks publication."""
    reply = await backend.budget.GetReadyGate(
        budget_pb2.GetReadyGateRequest(principal=principal.to_proto(), run_id=run_id),
        timeout=backend.timeout_s,
    )
    return as_ready_gate(reply)


@router.post(
    "/v1/runs/{run_id}/extend-review-budget",
    status_code=201,
    operation_id="extend_review_budget",
    response_model=ExtensionReceipt,
)
async def extend_review_budget(
    run_id: str,
    body: ExtendIn,
    principal: AdminKey,
    backend: Backend,
    request: Request,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    reply = await budget.extend_review_budget(request, backend, principal, run_id, body, idempotency_key)
    return as_extension_receipt(reply)
