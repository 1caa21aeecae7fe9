"""Console routes of review_state: the project's review policy, contact blocks and suppressions,
inbound mail, and the resolution of a parked delivery (admin key or the bootstrap token)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import (
    ADDRESS_PATTERN,
    AddressIn,
    CompositionSettingsIn,
    Contact,
    ContactList,
    DeliveryResolutionIn,
    InboundIn,
    InboundMessage,
    PolicyIn,
    Review,
    ReviewPolicy,
)

from gateway.auth import Caller, console_principal, org_principal, require_admin
from gateway.backends import Backends, backends
from gateway.commands import admin
from gateway.commands import reviews as commands
from gateway.responses import ShapedRoute
from gateway.translate import Json
from gateway.translate.reviews import as_contact, as_inbound_message, as_review, as_review_policy

router = APIRouter(tags=["reviews", "console"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
Admin = Annotated[Caller, Depends(require_admin)]
AddressParameter = Annotated[str, Path(max_length=320, pattern=ADDRESS_PATTERN)]


@router.put(
    "/v1/admin/projects/{project_id}/review-policy",
    operation_id="set_review_policy",
    response_model=ReviewPolicy,
)
async def set_review_policy(
    project_id: str, body: PolicyIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    principal = await console_principal(caller, request, project_id)
    return as_review_policy(await admin.set_review_policy(backend, principal, body))


@router.put(
    "/v1/admin/projects/{project_id}/composition-settings",
    operation_id="set_composition_settings",
    response_model=ReviewPolicy,
)
async def set_composition_settings(
    project_id: str, body: CompositionSettingsIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Whether the project requires a ``composition_token`` on every send, reply and forward; answers the
    project's policy with the setting, as ``get_effective_review_policy`` reads it."""
    principal = await console_principal(caller, request, project_id)
    return as_review_policy(await admin.set_review_policy(backend, principal, body))


@router.put(
    "/v1/admin/orgs/{org_id}/review-policy",
    operation_id="set_account_review_policy",
    response_model=ReviewPolicy,
)
async def set_account_review_policy(
    org_id: str, body: PolicyIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """The org's default policy (the "account default"): every project without its own override
    resolves to it, above the require_review floor."""
    principal = await org_principal(caller, request, org_id)
    reply = await admin.set_review_policy(backend, principal, body, account_default=True)
    return as_review_policy(reply, project=False)


@router.post(
    "/v1/admin/projects/{project_id}/blocks",
    status_code=201,
    operation_id="block_recipient",
    response_model=Contact,
)
async def block_recipient(
    project_id: str, body: AddressIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    principal = await console_principal(caller, request, project_id)
    return as_contact(await admin.add_contact(backend, principal, "blocks", body))


@router.post(
    "/v1/admin/projects/{project_id}/suppressions",
    status_code=201,
    operation_id="suppress_recipient",
    response_model=Contact,
)
async def suppress_recipient(
    project_id: str, body: AddressIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    principal = await console_principal(caller, request, project_id)
    return as_contact(await admin.add_contact(backend, principal, "suppressions", body))


@router.get(
    "/v1/admin/projects/{project_id}/contacts",
    operation_id="list_blocked_and_suppressed",
    response_model=ContactList,
)
async def list_blocked_and_suppressed(
    project_id: str, caller: Admin, request: Request, backend: Backend
) -> Json:
    """The project's blocked and suppressed recipients, with who put each on its list and since when."""
    principal = await console_principal(caller, request, project_id)
    reply = await admin.list_contacts(backend, principal)
    return {"contacts": [as_contact(c) for c in reply.contacts]}


@router.delete(
    "/v1/admin/projects/{project_id}/blocks/{address}",
    operation_id="unblock_recipient",
    response_model=Contact,
)
async def unblock_recipient(
    project_id: str, address: AddressParameter, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Take a recipient off the block list (404 when it is not on it)."""
    principal = await console_principal(caller, request, project_id)
    return as_contact(await admin.remove_contact(backend, principal, "blocks", address))


@router.delete(
    "/v1/admin/projects/{project_id}/suppressions/{address}",
    operation_id="unsuppress_recipient",
    response_model=Contact,
)
async def unsuppress_recipient(
    project_id: str, address: AddressParameter, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Take a recipient off the suppression list (404 when it is not on it)."""
    principal = await console_principal(caller, request, project_id)
    return as_contact(await admin.remove_contact(backend, principal, "suppressions", address))


@router.post(
    "/v1/admin/projects/{project_id}/inbound",
    status_code=201,
    operation_id="record_inbound_mail",
    response_model=InboundMessage,
)
async def record_inbound_mail(
    project_id: str, body: InboundIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Record a received message (a provider webhook would call the same), so replies and forwards
    have a parent."""
    principal = await console_principal(caller, request, project_id)
    message = review_pb2.RecordInboundRequest(
        principal=principal.to_proto(),
        to=body.to,
        cc=body.cc,
        subject=body.subject,
        body_text=body.body_text,
        headers=body.headers,
    )
    setattr(message, "from", body.from_)
    reply = await backend.review.RecordInbound(message, timeout=backend.timeout_s)
    return as_inbound_message(reply)


@router.post(
    "/v1/admin/projects/{project_id}/reviews/{review_id}/delivery-resolution",
    operation_id="resolve_delivery",
    response_model=Review,
)
async def resolve_delivery(
    project_id: str,
    review_id: str,
    body: DeliveryResolutionIn,
    caller: Admin,
    request: Request,
    backend: Backend,
) -> Json:
    """Close a parked delivery (``send_needs_reconciliation``) by evidence the platform cannot see:
    mark it delivered or failed, with the reason. Never a resend; ``409 wrong_state`` unless parked."""
    principal = await console_principal(caller, request, project_id)
    reply = await commands.resolve_delivery(backend, principal, review_id, body)
    return as_review(reply)
