"""The dispatch_budget routes: review rounds, extensions, session turns, gate decisions, journals."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from reviewloop.budget.v1 import budget_pb2
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.tenancy import ActorKind, Principal
from starlette.responses import Response

from gateway.auth import ANY_PROJECT_KEY, require
from gateway.backends import Backends, backends
from gateway.headers import IdempotencyKey
from gateway.translate import INT64_MAX, enum_name, timestamp

router = APIRouter(tags=["dispatch budget"])
Backend = Annotated[Backends, Depends(backends)]
Caller = Annotated[Principal, Depends(ANY_PROJECT_KEY)]
AdminKey = Annotated[Principal, Depends(require(ActorKind.ADMIN))]
Sha = Annotated[str, Field(max_length=64)]
JSONL = ("application/x-ndjson", "application/jsonl", "application/json-lines")


class Mode(StrEnum):
    WARM = "warm"
    COLD = "cold"


class SelectionIn(BaseModel):
    """A review selection: exactly runner, model, effort and mode."""

    model_config = ConfigDict(extra="forbid")
    runner: str = Field(min_length=1, max_length=80)
    model: str = Field(default="", max_length=80)
    effort: str = Field(default="", max_length=40)
    mode: Mode


class RunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repository: str = Field(default="", max_length=200)
    pr_number: int = Field(default=0, ge=0, le=INT64_MAX)
    head_sha: Sha = ""
    status: Literal["active", "failed", "interrupted", "published", "archived"] | None = None
    # The run's rungs of resolveReviewMode; omitted keeps what the run has.
    review_mode: Mode | None = None
    pr_work_review_mode: Mode | None = None
    repeat_review_context_mode: Mode | None = None


class AdmitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str = Field(min_length=1, max_length=80)
    attempt_key: str = Field(default="", max_length=200)
    kind: Literal["initial", "retry", "pipeline", "standalone", "publish_gate", "recheck"]
    trigger: Literal[
        "operator_request",
        "continue_fixing",
        "send_back",
        "fix_rereview",
        "recovered_fix_rereview",
        "publication_plan",
    ]
    head_sha: Sha = ""
    selection: SelectionIn | None = None
    receipt_id: str = Field(default="", max_length=40)


class SettleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: Literal["pass", "issues"] | None = None
    reviewed_head: Sha = ""
    no_verdict_reason: str = Field(default="", max_length=40)
    journal_run_id: str = Field(default="", max_length=80)


class ExtendIn(BaseModel):
    """run.extendReviewBudget. ``approved_by`` is accepted and ignored: authority comes from the key."""

    model_config = ConfigDict(extra="forbid")
    head_sha: Sha
    limit: StrictInt = Field(ge=1, le=1000)
    expected_limit: StrictInt = Field(ge=1, le=1000)
    scope_brief: str = Field(max_length=4000)
    request_id: str = Field(default="", max_length=255)
    approved_by: str | None = Field(default=None, max_length=200)


class JournalIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    events: list[dict[str, Any]] = Field(max_length=500)


def _mode(value: int) -> str:
    return enum_name(budget_pb2.ReviewMode, value, "REVIEW_MODE_")


def selection_json(message: budget_pb2.ReviewSelection) -> dict[str, Any]:
    return {
        "runner": message.runner,
        "model": message.model,
        "effort": message.effort,
        "mode": _mode(message.mode),
    }


def selection_proto(body: SelectionIn) -> budget_pb2.ReviewSelection:
    return budget_pb2.ReviewSelection(
        runner=body.runner,
        model=body.model,
        effort=body.effort,
        mode=budget_pb2.ReviewMode.Value(f"REVIEW_MODE_{body.mode.value.upper()}"),
    )


def extension_json(message: budget_pb2.ExtensionReceipt) -> dict[str, Any]:
    origin: dict[str, Any] = {
        "actor_kind": enum_name(common_pb2.ActorKind, message.origin.actor_kind, "ACTOR_KIND_"),
        "actor_id": message.origin.actor_id,
    }
    for name in ("key_id", "remote_addr", "user_agent"):
        if getattr(message.origin, name):
            origin[name] = getattr(message.origin, name)
    body: dict[str, Any] = {
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
    if message.repository:
        body["repository"] = message.repository
    if message.pr_number:
        body["pr_number"] = message.pr_number
    return body


def budget_json(message: budget_pb2.RoundBudget) -> dict[str, Any]:
    body: dict[str, Any] = {
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
        body["extension"] = extension_json(message.extension)
    if message.HasField("last_launch_refusal"):
        refusal = message.last_launch_refusal
        body["last_launch_refusal"] = {
            "run_id": refusal.run_id,
            "attempt_key": refusal.attempt_key,
            "trigger": enum_name(budget_pb2.LaunchTrigger, refusal.trigger, "LAUNCH_TRIGGER_"),
            "no_verdict": refusal.no_verdict,
            "reason": refusal.reason,
            "refused_at": timestamp(refusal.refused_at),
        }
    return body


def receipt_json(message: budget_pb2.AdmissionReceipt) -> dict[str, Any]:
    body: dict[str, Any] = {
        "receipt_id": message.receipt_id,
        "run_id": message.run_id,
        "scope_key": message.scope_key,
        "attempt_key": message.attempt_key,
        "kind": enum_name(budget_pb2.AttemptKind, message.kind, "ATTEMPT_KIND_"),
        "trigger": enum_name(budget_pb2.LaunchTrigger, message.trigger, "LAUNCH_TRIGGER_"),
        "head_sha": message.head_sha,
        "round": message.round,
        "admitted_at": timestamp(message.admitted_at),
    }
    if message.selection.runner:
        body["selection"] = selection_json(message.selection)
    if message.HasField("settlement"):
        s = message.settlement
        settlement: dict[str, Any] = {
            "outcome": enum_name(budget_pb2.SettlementOutcome, s.outcome, "SETTLEMENT_OUTCOME_"),
            "settled_at": timestamp(s.settled_at),
        }
        if s.reason:
            settlement["reason"] = s.reason
        if s.verdict:
            settlement["verdict"] = s.verdict
        body["settlement"] = settlement
    return body


def run_json(message: budget_pb2.Run) -> dict[str, Any]:
    body: dict[str, Any] = {
        "run_id": message.run_id,
        "status": enum_name(budget_pb2.RunStatus, message.status, "RUN_STATUS_"),
        "scope_key": message.scope_key,
    }
    if message.repository:
        body["repository"] = message.repository
    if message.pr_number:
        body["pr_number"] = message.pr_number
    if message.head_sha:
        body["head_sha"] = message.head_sha
    for field in ("review_mode", "pr_work_review_mode", "repeat_review_context_mode"):
        if getattr(message, field):
            body[field] = _mode(getattr(message, field))
    return body


# --- review rounds (spec 003) ---


@router.put("/v1/review-rounds/runs/{run_id}", operation_id="record_review_run")
async def record_review_run(run_id: str, body: RunIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.RecordRun(
        budget_pb2.RecordRunRequest(
            principal=principal.to_proto(),
            run_id=run_id,
            repository=body.repository,
            pr_number=body.pr_number,
            head_sha=body.head_sha,
            status=budget_pb2.RunStatus.Value(f"RUN_STATUS_{body.status.upper()}")
            if body.status
            else budget_pb2.RUN_STATUS_UNSPECIFIED,
            review_mode=_mode_value(body.review_mode),
            pr_work_review_mode=_mode_value(body.pr_work_review_mode),
            repeat_review_context_mode=_mode_value(body.repeat_review_context_mode),
        ),
        timeout=backend.timeout_s,
    )
    return run_json(reply)


@router.post("/v1/review-rounds/admissions", status_code=201, operation_id="admit_review_round")
async def admit_review_round(body: AdmitIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    request = budget_pb2.AdmitReviewRoundRequest(
        principal=principal.to_proto(),
        run_id=body.run_id,
        attempt_key=body.attempt_key,
        kind=budget_pb2.AttemptKind.Value(f"ATTEMPT_KIND_{body.kind.upper()}"),
        trigger=budget_pb2.LaunchTrigger.Value(f"LAUNCH_TRIGGER_{body.trigger.upper()}"),
        head_sha=body.head_sha,
        receipt_id=body.receipt_id,
    )
    if body.selection is not None:
        request.selection.CopyFrom(selection_proto(body.selection))
    reply = await backend.budget.AdmitReviewRound(request, timeout=backend.timeout_s)
    return {
        "receipt": receipt_json(reply.receipt),
        "reattached": reply.reattached,
        "review_round_budget": budget_json(reply.budget),
    }


@router.post("/v1/review-rounds/admissions/{receipt_id}/settlement", operation_id="settle_review_attempt")
async def settle_review_attempt(
    receipt_id: str, body: SettleIn, principal: Caller, backend: Backend
) -> dict[str, Any]:
    reply = await backend.budget.SettleAttempt(
        budget_pb2.SettleAttemptRequest(
            principal=principal.to_proto(),
            receipt_id=receipt_id,
            verdict=body.verdict or "",
            reviewed_head=body.reviewed_head,
            no_verdict_reason=body.no_verdict_reason,
            journal_run_id=body.journal_run_id,
        ),
        timeout=backend.timeout_s,
    )
    return {"receipt": receipt_json(reply.receipt), "review_round_budget": budget_json(reply.budget)}


@router.get("/v1/review-rounds/budget", operation_id="get_review_round_budget")
async def get_review_round_budget(
    principal: Caller, backend: Backend, run_id: Annotated[str, Query(min_length=1, max_length=80)]
) -> dict[str, Any]:
    reply = await backend.budget.GetRoundBudget(
        budget_pb2.GetRoundBudgetRequest(principal=principal.to_proto(), run_id=run_id),
        timeout=backend.timeout_s,
    )
    return budget_json(reply)


@router.post("/v1/runs/{run_id}/extend-review-budget", status_code=201, operation_id="extend_review_budget")
async def extend_review_budget(
    run_id: str,
    body: ExtendIn,
    principal: AdminKey,
    backend: Backend,
    request: Request,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    if idempotency_key and body.request_id and idempotency_key != body.request_id:
        raise invalid("/request_id", "differs from the Idempotency-Key header; send one key")
    origin = budget_pb2.RequestOrigin(
        actor_kind=common_pb2.ACTOR_KIND_ADMIN,
        actor_id=principal.actor_id,
        key_id=principal.actor_id,  # an admin key's principal is its key id
        remote_addr=request.client.host if request.client else "",
        user_agent=request.headers.get("user-agent", "")[:200],
    )
    reply = await backend.budget.ExtendReviewBudget(
        budget_pb2.ExtendReviewBudgetRequest(
            principal=principal.to_proto(),
            run_id=run_id,
            head_sha=body.head_sha,
            new_limit=body.limit,
            expected_prior_limit=body.expected_limit,
            scope_brief=body.scope_brief,
            idempotency_key=idempotency_key or body.request_id,
            origin=origin,
            request_id=request.headers.get("x-request-id", "")[:200],
        ),
        timeout=backend.timeout_s,
    )
    return extension_json(reply)


# --- attempt journals (spec 002) ---


async def _journal_events(request: Request) -> list[str]:
    """The request's events as JSON texts: a JSON-lines body, or {"events": [...]}."""
    raw = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in JSONL:
        return [line for line in raw.decode(errors="replace").splitlines() if line.strip()]
    try:
        body = JournalIn.model_validate(orjson.loads(raw))
    except orjson.JSONDecodeError:
        raise DomainError(
            Code.BAD_REQUEST, "The request body is not valid JSON; send a JSON object."
        ) from None
    except ValueError as exc:
        raise invalid(
            "/events", f"give an events array of at most 500 objects ({exc.__class__.__name__})"
        ) from None
    return [orjson.dumps(e).decode() for e in body.events]


@router.post(
    "/v1/journals/{run_id}/events",
    status_code=201,
    operation_id="append_journal_events",
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {"schema": JournalIn.model_json_schema()},
                "application/x-ndjson": {"schema": {"type": "string"}},
            }
        }
    },
)
async def append_journal_events(
    run_id: str, request: Request, principal: Caller, backend: Backend
) -> dict[str, Any]:
    events = await _journal_events(request)
    reply = await backend.budget.AppendJournalEvents(
        budget_pb2.AppendJournalEventsRequest(
            principal=principal.to_proto(), run_id=run_id, events_json=events
        ),
        timeout=backend.timeout_s,
    )
    return {
        "appended": reply.appended,
        "skipped_ephemeral": reply.skipped_ephemeral,
        "last_offset": reply.last_offset,
    }


@router.get("/v1/journals/{run_id}/evidence", operation_id="get_evidence_status")
async def get_evidence_status(run_id: str, principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.GetEvidenceStatus(
        budget_pb2.GetEvidenceStatusRequest(principal=principal.to_proto(), run_id=run_id),
        timeout=backend.timeout_s,
    )
    body: dict[str, Any] = {"run_id": run_id, "evidence": reply.evidence}
    if reply.offset:
        body["offset"] = reply.offset
        body["schema_version"] = reply.schema_version
    if reply.evidence_rejected_json:
        body["evidence_rejected"] = orjson.loads(reply.evidence_rejected_json)
    return body


# --- selection catalog, sequences, mode, lineage (spec 003) ---


class RunnerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=80)
    models: list[Annotated[str, Field(max_length=80)]] = Field(min_length=1, max_length=50)
    efforts: list[Annotated[str, Field(max_length=40)]] = Field(min_length=1, max_length=50)
    default_model: str = Field(max_length=80)
    default_effort: str = Field(max_length=40)
    supports_warm: bool = True
    supports_model_change: bool = False


class SequenceIn(BaseModel):
    """The rows go through the shared validator in the service, which names each bad row's field."""

    model_config = ConfigDict(extra="forbid")
    sequence: Any


class ModeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    explicit: Mode | None = None
    run: Mode | None = None
    pr_work: Mode | None = None
    repeat_context: Mode | None = None
    project_default: Mode | None = None
    project_config: dict[str, Any] | None = None
    # A stored run: its rungs fill those left unset here.
    run_id: str = Field(default="", max_length=80)


class BindIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repository: str = Field(min_length=1, max_length=200)
    pr_number: int = Field(ge=1, le=INT64_MAX)
    selection: SelectionIn
    base_sha: Sha
    head_sha: Sha
    review_id: str = Field(default="", max_length=80)
    new_review_id: str = Field(default="", max_length=80)


class CompleteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reviewed_head: Sha


def runner_json(message: budget_pb2.Runner) -> dict[str, Any]:
    return {
        "name": message.name,
        "models": list(message.models),
        "efforts": list(message.efforts),
        "default_model": message.default_model,
        "default_effort": message.default_effort,
        "supports_warm": message.supports_warm,
        "supports_model_change": message.supports_model_change,
    }


def binding_json(message: budget_pb2.ReviewSessionBinding) -> dict[str, Any]:
    return {
        "review_id": message.review_id,
        "session_id": message.session_id,
        "mode": _mode(message.mode),
        "range": {"base": message.range_base, "head": message.range_head},
        "fresh_session": message.fresh_session,
        "selection": selection_json(message.selection),
        "busy": message.busy,
    }


def _mode_value(mode: Mode | None) -> Any:
    if mode is None:
        return budget_pb2.REVIEW_MODE_UNSPECIFIED
    return budget_pb2.ReviewMode.Value(f"REVIEW_MODE_{mode.value.upper()}")


@router.post("/v1/review-rounds/runners", status_code=201, operation_id="register_runner")
async def register_runner(body: RunnerIn, principal: AdminKey, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.RegisterRunner(
        budget_pb2.RegisterRunnerRequest(
            principal=principal.to_proto(), runner=budget_pb2.Runner(**body.model_dump())
        ),
        timeout=backend.timeout_s,
    )
    return runner_json(reply)


@router.get("/v1/review-rounds/runners", operation_id="list_runners")
async def list_runners(principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.ListRunners(
        budget_pb2.ListRunnersRequest(principal=principal.to_proto()), timeout=backend.timeout_s
    )
    return {"runners": [runner_json(r) for r in reply.runners]}


def review_config_json(message: budget_pb2.ReviewConfig) -> dict[str, Any]:
    body: dict[str, Any] = {"config": orjson.loads(message.config_json)}
    if message.mode:
        body["mode"] = _mode(message.mode)
    return body


@router.put("/v1/review-rounds/config", operation_id="set_review_config")
async def set_review_config(
    config: Annotated[dict[str, Any], Body(examples=[{"review": {"mode": "warm"}}])],
    principal: AdminKey,
    backend: Backend,
) -> dict[str, Any]:
    """The project review configuration (admin): its `review.mode` is the project default mode of
    admissions and resolve_review_mode; removed keys are refused with a conversion hint."""
    reply = await backend.budget.SetReviewConfig(
        budget_pb2.SetReviewConfigRequest(
            principal=principal.to_proto(), config_json=orjson.dumps(config).decode()
        ),
        timeout=backend.timeout_s,
    )
    return review_config_json(reply)


@router.get("/v1/review-rounds/config", operation_id="get_review_config")
async def get_review_config(principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.GetReviewConfig(
        budget_pb2.GetReviewConfigRequest(principal=principal.to_proto()), timeout=backend.timeout_s
    )
    return review_config_json(reply)


@router.post("/v1/review-rounds/sequences/validate", operation_id="validate_review_sequence")
async def validate_review_sequence(body: SequenceIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.ValidateSequence(
        budget_pb2.ValidateSequenceRequest(
            principal=principal.to_proto(), sequence_json=orjson.dumps(body.sequence).decode()
        ),
        timeout=backend.timeout_s,
    )
    return {
        "sequence": [selection_json(r) for r in reply.rows],
        "request_review": orjson.loads(reply.request_review_json),
    }


@router.post("/v1/review-rounds/mode", operation_id="resolve_review_mode")
async def resolve_review_mode(body: ModeIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.ResolveReviewMode(
        budget_pb2.ResolveReviewModeRequest(
            principal=principal.to_proto(),
            explicit_mode=_mode_value(body.explicit),
            run_review_mode=_mode_value(body.run),
            pr_work_options_mode=_mode_value(body.pr_work),
            repeat_review_context_mode=_mode_value(body.repeat_context),
            project_default=_mode_value(body.project_default),
            project_config_json=orjson.dumps(body.project_config).decode()
            if body.project_config is not None
            else "",
            run_id=body.run_id,
        ),
        timeout=backend.timeout_s,
    )
    return {"mode": _mode(reply.mode), "source": reply.source}


@router.post("/v1/review-rounds/sessions", status_code=201, operation_id="bind_review_session")
async def bind_review_session(body: BindIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.BindReviewSession(
        budget_pb2.BindReviewSessionRequest(
            principal=principal.to_proto(),
            repository=body.repository,
            pr_number=body.pr_number,
            selection=selection_proto(body.selection),
            base_sha=body.base_sha,
            head_sha=body.head_sha,
            review_id=body.review_id,
            new_review_id=body.new_review_id,
        ),
        timeout=backend.timeout_s,
    )
    return binding_json(reply)


@router.post("/v1/review-rounds/sessions/{session_id}/complete", operation_id="complete_review_session")
async def complete_review_session(
    session_id: str, body: CompleteIn, principal: Caller, backend: Backend
) -> dict[str, Any]:
    reply = await backend.budget.CompleteReviewSession(
        budget_pb2.CompleteReviewSessionRequest(
            principal=principal.to_proto(), session_id=session_id, reviewed_head=body.reviewed_head
        ),
        timeout=backend.timeout_s,
    )
    return binding_json(reply)


# --- the review-run gate (spec 001) ---


class DigestIn(BaseModel):
    """The bounded digest's inputs; tool output is never accepted here."""

    model_config = ConfigDict(extra="forbid")
    last_human_message: str = Field(default="", max_length=100_000)
    last_assistant_message: str = Field(default="", max_length=100_000)
    loaded_skills: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=50)


class TurnIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    origin: str = Field(default="", max_length=40)
    depth: int = Field(default=0, ge=0, le=100)
    status: Literal["completed", "aborted", "failed"]
    tool_calls: int = Field(default=0, ge=0, le=100_000)
    digest: DigestIn = Field(default_factory=DigestIn)


class ReviewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    now: bool = False
    digest: DigestIn = Field(default_factory=DigestIn)


class EnabledIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool


class FinishIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    succeeded: bool


def decision_json(message: budget_pb2.GateDecision, spec_keys: bool = False) -> dict[str, Any]:
    """A gate decision; ``spec_keys`` gives the gates.jsonl record exactly as spec 001 spells it."""
    tool_calls, latency = ("toolCalls", "latencyMs") if spec_keys else ("tool_calls", "latency_ms")
    body: dict[str, Any] = {
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


def _digest_proto(digest: DigestIn) -> budget_pb2.TurnDigest:
    return budget_pb2.TurnDigest(**digest.model_dump())


def turn_json(reply: budget_pb2.RecordTurnResponse) -> dict[str, Any]:
    c = reply.counters
    body: dict[str, Any] = {
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
        body["decision"] = decision_json(reply.decision)
    if reply.not_due_reason:
        body["not_due_reason"] = reply.not_due_reason
    return body


@router.post("/v1/sessions/{session_id}/turns", operation_id="record_turn")
async def record_turn(session_id: str, body: TurnIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.RecordTurn(
        budget_pb2.RecordTurnRequest(
            principal=principal.to_proto(),
            session_id=session_id,
            origin=body.origin,
            depth=body.depth,
            status=budget_pb2.TurnStatus.Value(f"TURN_STATUS_{body.status.upper()}"),
            tool_calls=body.tool_calls,
            digest=_digest_proto(body.digest),
        ),
        timeout=backend.timeout_s + 5,  # the classifier's two 2 s attempts run inside this call
    )
    return turn_json(reply)


@router.post("/v1/sessions/{session_id}/review", operation_id="review_now")
async def review_now(session_id: str, body: ReviewIn, principal: Caller, backend: Backend) -> dict[str, Any]:
    reply = await backend.budget.DecideReview(
        budget_pb2.DecideReviewRequest(
            principal=principal.to_proto(),
            session_id=session_id,
            now=body.now,
            digest=_digest_proto(body.digest),
        ),
        timeout=backend.timeout_s + 5,
    )
    decided = reply.HasField("decision")  # "counted": the call claimed a review and the gate decided
    return turn_json(
        budget_pb2.RecordTurnResponse(
            counters=reply.counters,
            counted=decided,
            decision=reply.decision if decided else None,
            not_due_reason=reply.not_due_reason,
        )
    )


@router.put("/v1/sessions/{session_id}/review-enabled", operation_id="set_review_enabled")
async def set_review_enabled(
    session_id: str, body: EnabledIn, principal: Caller, backend: Backend
) -> dict[str, Any]:
    reply = await backend.budget.SetReviewEnabled(
        budget_pb2.SetReviewEnabledRequest(
            principal=principal.to_proto(), session_id=session_id, enabled=body.enabled
        ),
        timeout=backend.timeout_s,
    )
    return turn_json(budget_pb2.RecordTurnResponse(counters=reply.counters, counted=False))


@router.post("/v1/sessions/{session_id}/review/finish", operation_id="finish_review")
async def finish_review(
    session_id: str, body: FinishIn, principal: Caller, backend: Backend
) -> dict[str, Any]:
    reply = await backend.budget.FinishReview(
        budget_pb2.FinishReviewRequest(
            principal=principal.to_proto(), session_id=session_id, succeeded=body.succeeded
        ),
        timeout=backend.timeout_s,
    )
    return turn_json(budget_pb2.RecordTurnResponse(counters=reply, counted=False))


@router.get("/v1/gate-decisions", operation_id="list_gate_decisions", response_model=None)
async def list_gate_decisions(
    principal: Caller,
    backend: Backend,
    request: Request,
    session_id: Annotated[str, Query(max_length=80)] = "",
    cursor: Annotated[str, Query(max_length=40)] = "",
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
        lines = b"".join(orjson.dumps(decision_json(d, spec_keys=True)) + b"\n" for d in reply.decisions)
        headers = {"X-Next-Cursor": reply.next_cursor} if reply.next_cursor else None
        return Response(lines, media_type="application/x-ndjson", headers=headers)
    return {
        "decisions": [decision_json(d) for d in reply.decisions],
        "next_cursor": reply.next_cursor or None,
    }
