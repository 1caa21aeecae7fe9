"""The shared-pool auto-send governor, read-only, for the deployment operator (issue 35): every sending
pool's use today against its deployment-wide budget. Pools span orgs, so only the bootstrap admin
token reads them; the budgets are deployment settings, not a console verb."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from reviewloop.budget.v1 import budget_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.shapes import SendPoolList
from reviewloop.tenancy import ActorKind, Principal

from gateway.auth import Caller, require_admin
from gateway.backends import Backends, backends
from gateway.responses import ShapedRoute
from gateway.translate import Json

router = APIRouter(tags=["dispatch budget", "console"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
Admin = Annotated[Caller, Depends(require_admin)]


@router.get("/v1/admin/send-pools", operation_id="list_send_pools", response_model=SendPoolList)
async def list_send_pools(caller: Admin, backend: Backend) -> Json:
    """Each sending pool (From domain) today (UTC): units used, its budget, refunded and kept receipts."""
    if caller.principal is not None:
        raise DomainError(
            Code.FORBIDDEN_SCOPE,
            "The send pools span every org: reading them takes the bootstrap admin token.",
        )
    operator = Principal("*", "*", ActorKind.ADMIN, "bootstrap")
    reply = await backend.budget.ListSendPools(
        budget_pb2.ListSendPoolsRequest(principal=operator.to_proto()), timeout=backend.timeout_s
    )
    return {
        "default_budget_per_day": reply.default_budget_per_day,
        "pools": [
            {
                "pool": p.pool,
                "day": p.day,
                "used": p.used,
                "budget_per_day": p.budget_per_day,
                "remaining": max(p.budget_per_day - p.used, 0),
                "refunded": p.refunded,
                "kept": p.kept,
            }
            for p in reply.pools
        ],
    }
