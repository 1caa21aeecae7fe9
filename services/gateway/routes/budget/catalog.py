"""The review selection catalog (spec 003): runners, the project review configuration, review sequences,
mode resolution, and the session lineage a review is bound to."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Depends
from reviewloop.budget.v1 import budget_pb2
from reviewloop.shapes import (
    BindIn,
    CompleteIn,
    HeartbeatIn,
    ModeIn,
    ResolvedReviewMode,
    ReviewConfig,
    ReviewConfigIn,
    ReviewSessionBinding,
    RunnerIn,
    RunnerList,
    SequenceIn,
    SequenceValidation,
)
from reviewloop.tenancy import ActorKind, Principal

from gateway.auth import require
from gateway.backends import Backends, backends
from gateway.commands import budget
from gateway.responses import OrjsonResponse, ShapedRoute, encoded
from gateway.routes.budget import Caller
from gateway.translate import Json
from gateway.translate.budget import (
    as_review_config,
    as_review_session_binding,
    as_runner,
    as_selection,
    mode,
    mode_name,
    selection,
)

router = APIRouter(tags=["dispatch budget"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
AdminKey = Annotated[Principal, Depends(require(ActorKind.ADMIN))]


@router.post(
    "/v1/review-rounds/runners", status_code=201, operation_id="register_runner", response_model=RunnerIn
)
async def register_runner(body: RunnerIn, principal: AdminKey, backend: Backend) -> Json:
    reply = await backend.budget.RegisterRunner(
        budget_pb2.RegisterRunnerRequest(
            principal=principal.to_proto(), runner=budget_pb2.Runner(**body.model_dump())
        ),
        timeout=backend.timeout_s,
    )
    return as_runner(reply)


@router.get("/v1/review-rounds/runners", operation_id="list_runners", response_model=RunnerList)
async def list_runners(principal: Caller, backend: Backend) -> OrjsonResponse:
    reply = await budget.list_runners(backend, principal)
    return encoded({"runners": [as_runner(r) for r in reply.runners]})


@router.put("/v1/review-rounds/config", operation_id="set_review_config", response_model=ReviewConfig)
async def set_review_config(config: ReviewConfigIn, principal: AdminKey, backend: Backend) -> Json:
    """The project review configuration (admin): its `review.mode` is the project default mode of
    admissions and resolve_review_mode; removed keys are refused with a conversion hint."""
    reply = await backend.budget.SetReviewConfig(
        budget_pb2.SetReviewConfigRequest(
            principal=principal.to_proto(), config_json=orjson.dumps(config.root).decode()
        ),
        timeout=backend.timeout_s,
    )
    return as_review_config(reply)


@router.get("/v1/review-rounds/config", operation_id="get_review_config", response_model=ReviewConfig)
async def get_review_config(principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.GetReviewConfig(
        budget_pb2.GetReviewConfigRequest(principal=principal.to_proto()), timeout=backend.timeout_s
    )
    return as_review_config(reply)


@router.post(
    "/v1/review-rounds/sequences/validate",
    operation_id="validate_review_sequence",
    response_model=SequenceValidation,
)
async def validate_review_sequence(body: SequenceIn, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.ValidateSequence(
        budget_pb2.ValidateSequenceRequest(
            principal=principal.to_proto(), sequence_json=orjson.dumps(body.sequence).decode()
        ),
        timeout=backend.timeout_s,
    )
    return {
        "sequence": [as_selection(r) for r in reply.rows],
        "request_review": orjson.loads(reply.request_review_json),
    }


@router.post("/v1/review-rounds/mode", operation_id="resolve_review_mode", response_model=ResolvedReviewMode)
async def resolve_review_mode(body: ModeIn, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.ResolveReviewMode(
        budget_pb2.ResolveReviewModeRequest(
            principal=principal.to_proto(),
            explicit_mode=mode(body.explicit),
            run_review_mode=mode(body.run),
            pr_work_options_mode=mode(body.pr_work),
            repeat_review_context_mode=mode(body.repeat_context),
            project_default=mode(body.project_default),
            project_config_json=orjson.dumps(body.project_config).decode()
            if body.project_config is not None
            else "",
            run_id=body.run_id,
        ),
        timeout=backend.timeout_s,
    )
    return {"mode": mode_name(reply.mode), "source": reply.source}


@router.post(
    "/v1/review-rounds/sessions",
    status_code=201,
    operation_id="bind_review_session",
    response_model=ReviewSessionBinding,
)
async def bind_review_session(body: BindIn, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.BindReviewSession(
        budget_pb2.BindReviewSessionRequest(
            principal=principal.to_proto(),
            repository=body.repository,
            pr_number=body.pr_number,
            selection=selection(body.selection),
            base_sha=body.base_sha,
            head_sha=body.head_sha,
            review_id=body.review_id,
            new_review_id=body.new_review_id,
        ),
        timeout=backend.timeout_s,
    )
    return as_review_session_binding(reply)


@router.post(
    "/v1/review-rounds/sessions/{session_id}/complete",
    operation_id="complete_review_session",
    response_model=ReviewSessionBinding,
)
async def complete_review_session(
    session_id: str, body: CompleteIn, principal: Caller, backend: Backend
) -> Json:
    reply = await backend.budget.CompleteReviewSession(
        budget_pb2.CompleteReviewSessionRequest(
            principal=principal.to_proto(),
            session_id=session_id,
            reviewed_head=body.reviewed_head,
            lease_id=body.lease_id,
        ),
        timeout=backend.timeout_s,
    )
    return as_review_session_binding(reply)


@router.post(
    "/v1/review-rounds/sessions/{session_id}/heartbeat",
    operation_id="heartbeat_review_session",
    response_model=ReviewSessionBinding,
)
async def heartbeat_review_session(
    session_id: str, body: HeartbeatIn, principal: Caller, backend: Backend
) -> Json:
    """The reviewer is alive: its lease on the busy session is renewed. A crashed reviewer's lease
    lapses and the lineage can be continued again (never silently COLD)."""
    reply = await backend.budget.HeartbeatReviewSession(
        budget_pb2.HeartbeatReviewSessionRequest(
            principal=principal.to_proto(), session_id=session_id, lease_id=body.lease_id
        ),
        timeout=backend.timeout_s,
    )
    return as_review_session_binding(reply)
