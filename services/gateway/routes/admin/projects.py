"""Console routes (admin key or bootstrap token): projects and API keys, the gateway's own store.
``Idempotency-Key`` on these is honoured by the gateway's middleware (asgi.Edge)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from reviewloop.errors import Code, DomainError
from reviewloop.shapes import ApiKeyIn, ApiKeyOut, ProjectIn, ProjectOut, RevokedOut

from gateway import store
from gateway.auth import Caller, check_org, require_admin
from gateway.commands import admin
from gateway.responses import ShapedRoute, replay_answer
from gateway.translate import Json

router = APIRouter(tags=["console"], route_class=ShapedRoute)
Admin = Annotated[Caller, Depends(require_admin)]
SHOWN_ONCE = (
    "This key was issued by an earlier request with this Idempotency-Key and its secret was shown once; "
    "if it was lost, revoke the key and issue a new one."
)


@router.post("/v1/admin/projects", status_code=201, operation_id="create_project", response_model=ProjectOut)
async def create_project(body: ProjectIn, caller: Admin, request: Request) -> Json:
    """Create a project (and a new org, unless ``org_id`` names one the caller administers)."""
    org_id = body.org_id or (caller.principal.org_id if caller.principal else None)
    async with request.app.state.db.transaction() as uow:
        if org_id is not None:
            check_org(caller, org_id)
            if not await store.org_exists(uow.conn, org_id):
                raise DomainError(Code.NOT_FOUND, f"No org {org_id}; omit org_id to create a new org.")
        project = await store.create_project(uow.conn, body.name, org_id)
    return {"org_id": project.org_id, "project_id": project.project_id, "name": project.name}


@router.post("/v1/admin/api-keys", status_code=201, operation_id="issue_api_key", response_model=ApiKeyOut)
async def issue_api_key(body: ApiKeyIn, caller: Admin, request: Request) -> Json:
    """Issue a key bound to a project and an actor kind; agent and review_agent keys get an agent id."""
    key, secret = await admin.issue_api_key(request, caller, body)
    result: Json = {
        "key_id": key.key_id,
        "api_key": secret,
        "actor_kind": key.actor_kind.value,
        "org_id": key.org_id,
        "project_id": key.project_id,
    }
    if key.agent_id:
        result["agent_id"] = key.agent_id
    replay_answer(request, {**result, "api_key": None, "note": SHOWN_ONCE})
    return result


@router.post("/v1/admin/api-keys/{key_id}/revoke", operation_id="revoke_api_key", response_model=RevokedOut)
async def revoke_api_key(key_id: str, caller: Admin, request: Request) -> Json:
    """Revoke a key; it is refused from the next request on. Revoking twice is harmless."""
    await admin.revoke_api_key(request, caller, key_id)
    return {"key_id": key_id, "revoked": True}
