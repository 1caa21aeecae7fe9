"""The dispatch budget's verbs the routes and the console's Budgets and Review sequence pages share: a run's
record, the review runner catalog, the round budget and an admin's extension of it (spec 003)."""

from __future__ import annotations

from fastapi import Request
from reviewloop.budget.v1 import budget_pb2
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import invalid
from reviewloop.shapes import ExtendIn, RunIn
from reviewloop.tenancy import Principal

from gateway.backends import Backends
from gateway.translate.budget import mode, selection


async def list_runners(backend: Backends, principal: Principal) -> budget_pb2.ListRunnersResponse:
    """The review runner catalog."""
    request = budget_pb2.ListRunnersRequest(principal=principal.to_proto())
    reply: budget_pb2.ListRunnersResponse = await backend.budget.ListRunners(
        request, timeout=backend.timeout_s
    )
    return reply


async def get_run(backend: Backends, principal: Principal, run_id: str) -> budget_pb2.Run:
    """The run as recorded, its review sequence included."""
    request = budget_pb2.GetRunRequest(principal=principal.to_proto(), run_id=run_id)
    reply: budget_pb2.Run = await backend.budget.GetRun(request, timeout=backend.timeout_s)
    return reply


async def record_run(backend: Backends, principal: Principal, run_id: str, body: RunIn) -> budget_pb2.Run:
    """Record a run; an omitted field keeps what the run has."""
    request = budget_pb2.RecordRunRequest(
        principal=principal.to_proto(),
        run_id=run_id,
        repository=body.repository,
        pr_number=body.pr_number,
        head_sha=body.head_sha,
        status=budget_pb2.RunStatus.Value(f"RUN_STATUS_{body.status.upper()}")
        if body.status
        else budget_pb2.RUN_STATUS_UNSPECIFIED,
        review_mode=mode(body.review_mode),
        pr_work_review_mode=mode(body.pr_work_review_mode),
        repeat_review_context_mode=mode(body.repeat_review_context_mode),
        review_sequence=[selection(row) for row in body.review_sequence or ()],
    )
    reply: budget_pb2.Run = await backend.budget.RecordRun(request, timeout=backend.timeout_s)
    return reply


async def round_budget(backend: Backends, principal: Principal, run_id: str) -> budget_pb2.RoundBudget:
    """A run's review round budget: N, L, what is spent and any extension."""
    request = budget_pb2.GetRoundBudgetRequest(principal=principal.to_proto(), run_id=run_id)
    reply: budget_pb2.RoundBudget = await backend.budget.GetRoundBudget(request, timeout=backend.timeout_s)
    return reply


async def extend_review_budget(
    http: Request, backend: Backends, principal: Principal, run_id: str, body: ExtendIn, idempotency_key: str
) -> budget_pb2.ExtensionReceipt:
    """An admin raises a run's round limit for one head, with a scope brief; ``http`` is the request's
    provenance (its client, user agent and request id), recorded with the grant."""
    if idempotency_key and body.request_id and idempotency_key != body.request_id:
        raise invalid("/request_id", "differs from the Idempotency-Key header; send one key")
    origin = budget_pb2.RequestOrigin(
        actor_kind=common_pb2.ACTOR_KIND_ADMIN,
        actor_id=principal.actor_id,
        key_id=principal.actor_id,  # an admin key's principal is its key id
        remote_addr=http.client.host if http.client else "",
        user_agent=http.headers.get("user-agent", "")[:200],
    )
    request = budget_pb2.ExtendReviewBudgetRequest(
        principal=principal.to_proto(),
        run_id=run_id,
        head_sha=body.head_sha,
        new_limit=body.limit,
        expected_prior_limit=body.expected_limit,
        scope_brief=body.scope_brief,
        idempotency_key=idempotency_key or body.request_id,
        origin=origin,
        request_id=http.headers.get("x-request-id", "")[:200],
    )
    reply: budget_pb2.ExtensionReceipt = await backend.budget.ExtendReviewBudget(
        request, timeout=backend.timeout_s
    )
    return reply
