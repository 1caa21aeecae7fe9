"""Console routes of the rules service (admin key or the bootstrap token): house-style rules, a rule
lineage's undo / approve / reject / retire, categories and graduation, the risk dial, backlog pacing, rule settings, and the
composition-token key rotation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from reviewloop.errors import Code, DomainError
from reviewloop.rules.v1 import rules_pb2
from reviewloop.shapes import (
    AdminCategoryIn,
    Category,
    CompositionKey,
    GraduateIn,
    GraduationProposal,
    GraduationProposalList,
    HouseRuleIn,
    PacingSettings,
    PacingSettingsIn,
    PromoteRuleRequest,
    RejectProposalIn,
    RevIn,
    RiskDial,
    RiskDialIn,
    Rule,
    RuleSettings,
    RuleSettingsIn,
    SaveRuleRequest,
    UpdateCategoryRequest,
)
from reviewloop.tenancy import ActorKind, Principal

from gateway.auth import Caller, admin_actor_id, check_org, console_principal, org_principal, require_admin
from gateway.backends import Backends, backends
from gateway.commands import rules as commands
from gateway.commands.rules import RuleAction
from gateway.responses import ShapedRoute
from gateway.routes.rules import IdempotencyKey, save_request
from gateway.translate import Json
from gateway.translate.rules import (
    as_category,
    as_graduation_proposal,
    as_pacing_settings,
    as_risk_dial,
    as_rule,
)

router = APIRouter(tags=["rules", "console"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
Admin = Annotated[Caller, Depends(require_admin)]


async def _owner_principal(
    caller: Caller, request: Request, backend: Backends, *, category_id: str = "", lineage_id: str = ""
) -> Principal:
    """The admin principal for a route that names only a category or a rule lineage."""
    owner = rules_pb2.ResolveOwnerRequest()
    if category_id:
        owner.category_id = category_id
    else:
        owner.lineage_id = lineage_id
    reply = await backend.rules.ResolveOwner(owner, timeout=backend.timeout_s)
    if reply.project_id:
        check_org(caller, reply.org_id)
        return Principal(reply.org_id, reply.project_id, ActorKind.ADMIN, admin_actor_id(caller))
    return await org_principal(caller, request, reply.org_id)


# --- rules ---------------------------------------------------------------------------------------


@router.post(
    "/v1/admin/orgs/{org_id}/rules",
    status_code=201,
    operation_id="save_house_style_rule",
    response_model=Rule,
)
async def save_house_style_rule(
    org_id: str,
    body: HouseRuleIn,
    caller: Admin,
    request: Request,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """Org house style: inherited by every project of the org (console only)."""
    principal = await org_principal(caller, request, org_id)
    rule = SaveRuleRequest(
        rule_text=body.rule_text,
        kind=body.kind,
        priority=body.priority,
        lineage_id=body.lineage_id,
        expected_rev=body.expected_rev,
    )
    reply = await backend.rules.SaveRule(
        save_request(principal, rule, "org", idempotency_key), timeout=backend.timeout_s
    )
    return as_rule(reply)


async def _lineage_verb(action: RuleAction, caller: Caller, request: Request, backend: Backends) -> Json:
    principal = await _owner_principal(caller, request, backend, lineage_id=action.lineage_id)
    return as_rule(await commands.lineage_verb(backend, principal, action))


@router.post("/v1/admin/rules/{lineage_id}/undo", operation_id="undo_rule", response_model=Rule)
async def undo_rule(lineage_id: str, body: RevIn, caller: Admin, request: Request, backend: Backend) -> Json:
    """Restore the revision in force before the last change (a new revision)."""
    return await _lineage_verb(RuleAction("UndoRule", lineage_id, body.rev), caller, request, backend)


@router.post("/v1/admin/rules/{lineage_id}/promote", operation_id="admin_promote_rule", response_model=Rule)
async def admin_promote_rule(
    lineage_id: str,
    body: PromoteRuleRequest,
    caller: Admin,
    request: Request,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """Promote a rule: a category rule to general, or with ``to_layer: org`` a project rule to org house
    style (every project of the org inherits it). Audited as a revision of its lineage."""
    layer = "" if body.to_layer == "project" else body.to_layer
    return await _lineage_verb(
        RuleAction("PromoteRule", lineage_id, body.rev, idempotency_key, layer), caller, request, backend
    )


@router.post("/v1/admin/rules/{lineage_id}/approve", operation_id="approve_rule", response_model=Rule)
async def approve_rule(
    lineage_id: str, body: RevIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Accept a proposed (staged) revision into the effective stack."""
    return await _lineage_verb(RuleAction("ApproveRule", lineage_id, body.rev), caller, request, backend)


@router.post("/v1/admin/rules/{lineage_id}/reject", operation_id="reject_rule", response_model=Rule)
async def reject_rule(
    lineage_id: str, body: RevIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    return await _lineage_verb(RuleAction("RejectRule", lineage_id, body.rev), caller, request, backend)


@router.post("/v1/admin/rules/{lineage_id}/retire", operation_id="retire_rule", response_model=Rule)
async def retire_rule(
    lineage_id: str, body: RevIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    return await _lineage_verb(RuleAction("RetireRule", lineage_id, body.rev), caller, request, backend)


# --- categories and graduation -------------------------------------------------------------------


@router.post(
    "/v1/admin/projects/{project_id}/categories",
    status_code=201,
    operation_id="predefine_category",
    response_model=Category,
)
async def predefine_category(
    project_id: str,
    body: AdminCategoryIn,
    caller: Admin,
    request: Request,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    principal = await console_principal(caller, request, project_id)
    return as_category(await commands.create_category(backend, principal, body, idempotency_key))


@router.patch("/v1/admin/categories/{category_id}", operation_id="update_category", response_model=Category)
async def update_category(
    category_id: str, body: UpdateCategoryRequest, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Rename, redescribe, or set the never_graduate lock (ids never change)."""
    principal = await _owner_principal(caller, request, backend, category_id=category_id)
    return as_category(await commands.update_category(backend, principal, category_id, body))


@router.post(
    "/v1/admin/categories/{category_id}/graduate", operation_id="graduate_category", response_model=Category
)
async def graduate_category(
    category_id: str, body: GraduateIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """A human flips the rung: one up (auto_silent through the maturity gate), or any down."""
    principal = await _owner_principal(caller, request, backend, category_id=category_id)
    return as_category(await commands.graduate(backend, principal, category_id, body))


@router.get(
    "/v1/admin/projects/{project_id}/graduation-proposals",
    operation_id="list_graduation_proposals",
    response_model=GraduationProposalList,
)
async def list_graduation_proposals(
    project_id: str, caller: Admin, request: Request, backend: Backend
) -> Json:
    """The proposals waiting for a human, newest first, each with its category's graduation status."""
    principal = await console_principal(caller, request, project_id)
    reply = await commands.graduation_proposals(backend, principal)
    return {"proposals": [as_graduation_proposal(p) for p in reply.proposals]}


@router.post(
    "/v1/admin/projects/{project_id}/graduation-proposals/{proposal_id}/reject",
    operation_id="reject_graduation_proposal",
    response_model=GraduationProposal,
)
async def reject_graduation_proposal(
    project_id: str,
    proposal_id: str,
    body: RejectProposalIn,
    caller: Admin,
    request: Request,
    backend: Backend,
) -> Json:
    """Close a waiting proposal with the reason its agent reads verbatim; the category stays on its rung.
    (To approve one, graduate the category to its ``to_state``.)"""
    principal = await console_principal(caller, request, project_id)
    reply = await commands.reject_graduation_proposal(backend, principal, proposal_id, body)
    return as_graduation_proposal(reply)


# --- the risk dial, rule settings, signing keys ---------------------------------------------------


@router.put(
    "/v1/admin/projects/{project_id}/risk-dial", operation_id="set_risk_dial", response_model=RiskDial
)
async def set_risk_dial(
    project_id: str, body: RiskDialIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Account fields merge (``null`` resets one); each listed category's overrides are replaced."""
    principal = await console_principal(caller, request, project_id)
    return as_risk_dial(await commands.set_risk_dial(backend, principal, body))


@router.get(
    "/v1/admin/projects/{project_id}/pacing",
    operation_id="get_pacing_settings",
    response_model=PacingSettings,
)
async def get_pacing_settings(project_id: str, caller: Admin, request: Request, backend: Backend) -> Json:
    """The project's backlog pacing values in force (the risk dial's family)."""
    principal = await console_principal(caller, request, project_id)
    return as_pacing_settings(await commands.pacing_settings(backend, principal))


@router.put(
    "/v1/admin/projects/{project_id}/pacing",
    operation_id="set_pacing_settings",
    response_model=PacingSettings,
)
async def set_pacing_settings(
    project_id: str, body: PacingSettingsIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """Set how a rule change's stale drafts are nudged: ``lookahead_window`` at a time per category, each
    suggesting at most ``rework_batch_max``, refills ``nudge_min_interval_ms`` apart. A field set to
    ``null`` returns to its default (3, 10, 5000); an absent one is untouched."""
    principal = await console_principal(caller, request, project_id)
    return as_pacing_settings(await commands.set_pacing_settings(backend, principal, body))


@router.get(
    "/v1/admin/projects/{project_id}/rule-settings",
    operation_id="get_rule_settings",
    response_model=RuleSettings,
)
async def get_rule_settings(project_id: str, caller: Admin, request: Request, backend: Backend) -> Json:
    principal = await console_principal(caller, request, project_id)
    reply = await backend.rules.GetRuleSettings(
        rules_pb2.GetRuleSettingsRequest(principal=principal.to_proto()), timeout=backend.timeout_s
    )
    return {"project_id": reply.project_id, "write_approval": reply.write_approval}


@router.put(
    "/v1/admin/projects/{project_id}/rule-settings",
    operation_id="set_rule_settings",
    response_model=RuleSettings,
)
async def set_rule_settings(
    project_id: str, body: RuleSettingsIn, caller: Admin, request: Request, backend: Backend
) -> Json:
    """``write_approval``: agent-authored rules are born ``proposed`` and wait for a human."""
    principal = await console_principal(caller, request, project_id)
    reply = await backend.rules.SetRuleSettings(
        rules_pb2.SetRuleSettingsRequest(principal=principal.to_proto(), write_approval=body.write_approval),
        timeout=backend.timeout_s,
    )
    return {"project_id": reply.project_id, "write_approval": reply.write_approval}


@router.post(
    "/v1/admin/composition-keys/rotate", operation_id="rotate_composition_key", response_model=CompositionKey
)
async def rotate_composition_key(caller: Admin, backend: Backend) -> Json:
    """A new signing key for composition tokens (operator only: the key serves every org)."""
    if caller.principal is not None:
        raise DomainError(Code.FORBIDDEN_SCOPE, "Rotating the signing key takes the bootstrap admin token.")
    operator = Principal("*", "*", ActorKind.ADMIN, "bootstrap")
    reply = await backend.rules.RotateCompositionKey(
        rules_pb2.RotateCompositionKeyRequest(principal=operator.to_proto()), timeout=backend.timeout_s
    )
    return {"key_id": reply.key_id}
