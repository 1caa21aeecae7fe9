"""The console verbs of review_state and of the gateway's own store: the review policy (a project's
override, the org's account default, the composition setting), the block and suppression lists, and API
keys (issue, revoke)."""

from __future__ import annotations

from typing import Literal

from fastapi import Request
from reviewloop.errors import Code, DomainError
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import AddressIn, ApiKeyIn, CompositionSettingsIn, PolicyIn
from reviewloop.tenancy import ActorKind, Principal

from gateway import store
from gateway.auth import Caller, check_org
from gateway.backends import Backends

# A recipient list: ``blocks`` (never mailed) or ``suppressions`` (bounced or complained).
ContactList = Literal["blocks", "suppressions"]


async def review_policy(backend: Backends, principal: Principal) -> review_pb2.ReviewPolicy:
    """The resolved policy, where it comes from, and each layer's setting."""
    request = review_pb2.GetReviewPolicyRequest(principal=principal.to_proto())
    reply: review_pb2.ReviewPolicy = await backend.review.GetReviewPolicy(request, timeout=backend.timeout_s)
    return reply


async def set_review_policy(
    backend: Backends,
    principal: Principal,
    body: PolicyIn | CompositionSettingsIn,
    *,
    account_default: bool = False,
) -> review_pb2.ReviewPolicy:
    """Set the project's policy (or, ``account_default``, the org's), or its composition setting."""
    request = review_pb2.SetReviewPolicyRequest(
        principal=principal.to_proto(), account_default=account_default
    )
    if isinstance(body, PolicyIn):
        request.policy = body.policy
    else:
        request.require_composition_token = body.require_composition_token
    reply: review_pb2.ReviewPolicy = await backend.review.SetReviewPolicy(request, timeout=backend.timeout_s)
    return reply


async def list_contacts(backend: Backends, principal: Principal) -> review_pb2.ListContactsResponse:
    """The project's blocked and suppressed recipients."""
    request = review_pb2.ListContactsRequest(principal=principal.to_proto())
    reply: review_pb2.ListContactsResponse = await backend.review.ListContacts(
        request, timeout=backend.timeout_s
    )
    return reply


async def add_contact(
    backend: Backends, principal: Principal, listed: ContactList, body: AddressIn
) -> review_pb2.Contact:
    """Put a recipient on the block or suppression list."""
    rpc = backend.review.AddBlock if listed == "blocks" else backend.review.AddSuppression
    request = review_pb2.ContactRequest(principal=principal.to_proto(), address=body.address)
    reply: review_pb2.Contact = await rpc(request, timeout=backend.timeout_s)
    return reply


async def remove_contact(
    backend: Backends, principal: Principal, listed: ContactList, address: str
) -> review_pb2.Contact:
    """Take a recipient off the block or suppression list (404 when it is not on it)."""
    rpc = backend.review.RemoveBlock if listed == "blocks" else backend.review.RemoveSuppression
    request = review_pb2.ContactRequest(principal=principal.to_proto(), address=address)
    reply: review_pb2.Contact = await rpc(request, timeout=backend.timeout_s)
    return reply


async def issue_api_key(http: Request, caller: Caller, body: ApiKeyIn) -> tuple[store.ApiKey, str]:
    """A key bound to a project of the caller's org and an actor kind, and its secret (shown once)."""
    if body.actor_kind is ActorKind.SYSTEM:
        raise DomainError(
            Code.BAD_REQUEST, "/actor_kind: must be agent, human, review_agent, service or admin"
        )
    async with http.app.state.db.transaction() as uow:
        project = await store.get_project(uow.conn, body.project_id)
        if project is None:
            raise DomainError(Code.NOT_FOUND, f"No project {body.project_id}.")
        check_org(caller, project.org_id)
        return await store.issue_key(uow.conn, project, body.actor_kind, body.name, body.email)


async def revoke_api_key(http: Request, caller: Caller, key_id: str) -> None:
    """Revoke a key of the caller's org; it is refused from the next request on (twice is harmless)."""
    async with http.app.state.db.transaction() as uow:
        key = await store.get_key(uow.conn, key_id)
        if key is None:
            raise DomainError(Code.NOT_FOUND, f"No key {key_id}.")
        check_org(caller, key.org_id)
        await store.revoke_key(uow.conn, key_id)
    http.app.state.key_cache.forget(key_id)
