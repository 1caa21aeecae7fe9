"""Console routes (admin key or bootstrap token): projects and API keys. ``Idempotency-Key`` on these is
honoured by the gateway's IdempotentMutations middleware (app.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from reviewloop.errors import Code, DomainError
from reviewloop.tenancy import ActorKind

from gateway import store
from gateway.auth import Caller, check_org, require_admin

router = APIRouter(prefix="/v1/admin", tags=["console"])
Admin = Annotated[Caller, Depends(require_admin)]


class ProjectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    org_id: str | None = Field(default=None, max_length=40)


class ProjectOut(BaseModel):
    org_id: str
    project_id: str
    name: str


class ApiKeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    project_id: str = Field(min_length=1, max_length=40)
    actor_kind: ActorKind
    name: str = Field(default="", max_length=200)


class ApiKeyOut(BaseModel):
    key_id: str
    api_key: str = Field(description="The secret, shown once; only its hash is stored.")
    actor_kind: ActorKind
    org_id: str
    project_id: str
    agent_id: str | None = None


class RevokedOut(BaseModel):
    key_id: str
    revoked: bool


@router.post("/projects", status_code=201, operation_id="create_project", response_model=ProjectOut)
async def create_project(body: ProjectIn, caller: Admin, request: Request) -> dict[str, Any]:
    """Create a project (and a new org, unless ``org_id`` names one the caller administers)."""
    org_id = body.org_id or (caller.principal.org_id if caller.principal else None)
    async with request.app.state.db.transaction() as uow:
        if org_id is not None:
            check_org(caller, org_id)
            if not await store.org_exists(uow.conn, org_id):
                raise DomainError(Code.NOT_FOUND, f"No org {org_id}; omit org_id to create a new org.")
        project = await store.create_project(uow.conn, body.name, org_id)
    return {"org_id": project.org_id, "project_id": project.project_id, "name": project.name}


@router.post(
    "/api-keys",
    status_code=201,
    operation_id="issue_api_key",
    response_model=ApiKeyOut,
    response_model_exclude_unset=True,
)
async def issue_api_key(body: ApiKeyIn, caller: Admin, request: Request) -> dict[str, Any]:
    """Issue a key bound to a project and an actor kind; agent and review_agent keys get an agent id."""
    if body.actor_kind is ActorKind.SYSTEM:
        raise DomainError(Code.BAD_REQUEST, "/actor_kind: must be agent, human, review_agent or admin")
    async with request.app.state.db.transaction() as uow:
        project = await store.get_project(uow.conn, body.project_id)
        if project is None:
            raise DomainError(Code.NOT_FOUND, f"No project {body.project_id}.")
        check_org(caller, project.org_id)
        key, secret = await store.issue_key(uow.conn, project, body.actor_kind, body.name)
    result: dict[str, Any] = {
        "key_id": key.key_id,
        "api_key": secret,
        "actor_kind": key.actor_kind.value,
        "org_id": key.org_id,
        "project_id": key.project_id,
    }
    if key.agent_id:
        result["agent_id"] = key.agent_id
    return result


@router.post("/api-keys/{key_id}/revoke", operation_id="revoke_api_key", response_model=RevokedOut)
async def revoke_api_key(key_id: str, caller: Admin, request: Request) -> dict[str, Any]:
    """Revoke a key; it is refused from the next request on. Revoking twice is harmless."""
    async with request.app.state.db.transaction() as uow:
        key = await store.get_key(uow.conn, key_id)
        if key is None:
            raise DomainError(Code.NOT_FOUND, f"No key {key_id}.")
        check_org(caller, key.org_id)
        await store.revoke_key(uow.conn, key_id)
    request.app.state.key_cache.forget(key_id)
    return {"key_id": key_id, "revoked": True}
