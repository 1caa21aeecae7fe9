"""The review-run gate (spec 001): a session's turns, a review asked for now, the gate switched on or off,
a review finished, and the decision log."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from reviewloop.budget.v1 import budget_pb2
from reviewloop.shapes import (
    EnabledIn,
    FinishIn,
    GateConfigIn,
    GateConfigOut,
    GateDecisionList,
    ReviewIn,
    TurnIn,
    TurnResult,
)
from starlette.responses import Response

from gateway.backends import Backends, backends
from gateway.responses import ShapedRoute, encoded
from gateway.routes.budget import JSONL, Caller
from gateway.translate import Json
from gateway.translate.budget import as_gate_decision, as_turn_result, digest

router = APIRouter(tags=["dispatch budget"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]


@router.post("/v1/sessions/{session_id}/turns", operation_id="record_turn", response_model=TurnResult)
async def record_turn(session_id: str, body: TurnIn, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.RecordTurn(
        budget_pb2.RecordTurnRequest(
            principal=principal.to_proto(),
            session_id=session_id,
            origin=body.origin,
            depth=body.depth,
            status=budget_pb2.TurnStatus.Value(f"TURN_STATUS_{body.status.upper()}"),
            tool_calls=body.tool_calls,
            digest=digest(body.digest),
        ),
        timeout=backend.timeout_s + 5,  # the classifier's two 2 s attempts run inside this call
    )
    return as_turn_result(reply)


@router.post("/v1/sessions/{session_id}/review", operation_id="review_now", response_model=TurnResult)
async def review_now(session_id: str, body: ReviewIn, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.DecideReview(
        budget_pb2.DecideReviewRequest(
            principal=principal.to_proto(),
            session_id=session_id,
            now=body.now,
            digest=digest(body.digest),
        ),
        timeout=backend.timeout_s + 5,
    )
    decided = reply.HasField("decision")  # "counted": the call claimed a review and the gate decided
    return as_turn_result(
        budget_pb2.RecordTurnResponse(
            counters=reply.counters,
            counted=decided,
            decision=reply.decision if decided else None,
            not_due_reason=reply.not_due_reason,
        )
    )


@router.put(
    "/v1/sessions/{session_id}/review-enabled", operation_id="set_review_enabled", response_model=TurnResult
)
async def set_review_enabled(session_id: str, body: EnabledIn, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.SetReviewEnabled(
        budget_pb2.SetReviewEnabledRequest(
            principal=principal.to_proto(), session_id=session_id, enabled=body.enabled
        ),
        timeout=backend.timeout_s,
    )
    return as_turn_result(budget_pb2.RecordTurnResponse(counters=reply.counters, counted=False))


@router.post(
    "/v1/sessions/{session_id}/review/finish", operation_id="finish_review", response_model=TurnResult
)
async def finish_review(session_id: str, body: FinishIn, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.FinishReview(
        budget_pb2.FinishReviewRequest(
            principal=principal.to_proto(),
            session_id=session_id,
            succeeded=body.succeeded,
            receipt_id=body.receipt_id,
        ),
        timeout=backend.timeout_s,
    )
    return as_turn_result(budget_pb2.RecordTurnResponse(counters=reply, counted=False))


@router.put("/v1/review-rounds/gate-config", operation_id="set_gate_config", response_model=GateConfigOut)
async def set_gate_config(body: GateConfigIn, principal: Caller, backend: Backend) -> Json:
    """The project's gate configuration (admin): enabled, gate kind, thresholds, cooldowns,
    timeout_minutes and the classifier endpoint; what it leaves unset keeps the deployment default."""
    reply = await backend.budget.SetGateConfig(
        budget_pb2.SetGateConfigRequest(
            principal=principal.to_proto(),
            overrides_json=orjson.dumps(body.model_dump(exclude_none=True)).decode(),
        ),
        timeout=backend.timeout_s,
    )
    return {"overrides": orjson.loads(reply.overrides_json), "effective": orjson.loads(reply.effective_json)}


@router.get("/v1/review-rounds/gate-config", operation_id="get_gate_config", response_model=GateConfigOut)
async def get_gate_config(principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.GetGateConfig(
        budget_pb2.GetGateConfigRequest(principal=principal.to_proto()), timeout=backend.timeout_s
    )
    return {"overrides": orjson.loads(reply.overrides_json), "effective": orjson.loads(reply.effective_json)}


@router.get("/v1/gate-decisions", operation_id="list_gate_decisions", response_model=GateDecisionList)
async def list_gate_decisions(
    principal: Caller,
    backend: Backend,
    request: Request,
    session_id: Annotated[str, Query(max_length=80)] = "",
    cursor: Annotated[
        str,
        Query(max_length=40, pattern=r"^[0-9]{0,18}$", description="the last decision id of the page before"),
    ] = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    """The decision log. ``Accept: application/x-ndjson`` answers the gates.jsonl lines of spec 001."""
    reply = await backend.budget.ListGateDecisions(
        budget_pb2.ListGateDecisionsRequest(
            principal=principal.to_proto(), session_id=session_id, cursor=cursor, limit=limit
        ),
        timeout=backend.timeout_s,
    )
    accept = request.headers.get("accept", "")
    if any(kind in accept for kind in JSONL):
        lines = b"".join(orjson.dumps(as_gate_decision(d, spec_keys=True)) + b"\n" for d in reply.decisions)
        headers = {"X-Next-Cursor": reply.next_cursor} if reply.next_cursor else None
        return Response(lines, media_type="application/x-ndjson", headers=headers)
    return encoded(
        {
            "decisions": [as_gate_decision(d) for d in reply.decisions],
            "next_cursor": reply.next_cursor or None,
        }
    )
