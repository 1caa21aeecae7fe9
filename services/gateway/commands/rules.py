"""The rules service's verbs asked from more than one place (the agent plane's routes, the admin routes and
the console's pages): the rule stack and a lineage's history, the verbs on a rule's lineage (retire, undo,
promote, approve, reject), naming the rev the caller read (a stale one is 409), the category registry
(create, update, merge), graduation (status, proposals, the rung a human sets), the risk dial and backlog
pacing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reviewloop.rules.v1 import rules_pb2
from reviewloop.shapes import (
    AdminCategoryIn,
    GraduateIn,
    MergeCategoriesRequest,
    PacingSettingsIn,
    ProposeCategoryRequest,
    RejectProposalIn,
    RiskDialIn,
    UpdateCategoryRequest,
)
from reviewloop.tenancy import Principal

from gateway.backends import Backends
from gateway.translate.rules import category_scope, risk_values

LineageVerb = Literal["RetireRule", "UndoRule", "PromoteRule", "ApproveRule", "RejectRule"]


@dataclass(frozen=True)
class RuleAction:
    """``verb`` on ``lineage_id`` at the ``rev`` the caller read; ``to_layer`` (``org``) only to promote a
    project rule to house style."""

    verb: LineageVerb
    lineage_id: str
    rev: int
    idempotency_key: str = ""
    to_layer: str = ""


async def lineage_verb(backend: Backends, principal: Principal, action: RuleAction) -> rules_pb2.Rule:
    asked = rules_pb2.RuleActionRequest(
        principal=principal.to_proto(),
        lineage_id=action.lineage_id,
        expected_rev=action.rev,
        idempotency_key=action.idempotency_key,
        to_layer=action.to_layer,
    )
    reply: rules_pb2.Rule = await getattr(backend.rules, action.verb)(asked, timeout=backend.timeout_s)
    return reply


async def update_category(
    backend: Backends, principal: Principal, category_id: str, body: UpdateCategoryRequest
) -> rules_pb2.Category:
    """Rename, redescribe or lock a category; a field left out is untouched."""
    patch = rules_pb2.UpdateCategoryRequest(principal=principal.to_proto(), category_id=category_id)
    if body.name is not None:
        patch.name = body.name
    if body.description is not None:
        patch.description = body.description
    if body.never_graduate is not None:
        patch.never_graduate = body.never_graduate
    reply: rules_pb2.Category = await backend.rules.UpdateCategory(patch, timeout=backend.timeout_s)
    return reply


async def list_categories(
    backend: Backends, principal: Principal, *, cursor: str = "", limit: int = 200
) -> rules_pb2.ListCategoriesResponse:
    """A page of the project's category registry."""
    request = rules_pb2.ListCategoriesRequest(principal=principal.to_proto(), cursor=cursor, limit=limit)
    reply: rules_pb2.ListCategoriesResponse = await backend.rules.ListCategories(
        request, timeout=backend.timeout_s
    )
    return reply


async def risk_dial(backend: Backends, principal: Principal, category_id: str = "") -> rules_pb2.RiskDial:
    """The project's risk dial, or a category's when ``category_id`` names one."""
    request = rules_pb2.GetRiskDialRequest(principal=principal.to_proto(), category_id=category_id)
    reply: rules_pb2.RiskDial = await backend.rules.GetRiskDial(request, timeout=backend.timeout_s)
    return reply


async def get_rules(
    backend: Backends,
    principal: Principal,
    *,
    scope: str = "",
    category_id: str = "",
    agent_id: str = "",
    status: str = "",
) -> rules_pb2.GetRulesResponse:
    """The effective rule stack, ladder applied, narrowed by the filters given (``proposed``: the rules
    awaiting approval)."""
    request = rules_pb2.GetRulesRequest(
        principal=principal.to_proto(), scope=scope, category_id=category_id, agent_id=agent_id, status=status
    )
    reply: rules_pb2.GetRulesResponse = await backend.rules.GetRules(request, timeout=backend.timeout_s)
    return reply


async def rule_history(backend: Backends, principal: Principal, lineage_id: str) -> rules_pb2.RuleHistory:
    """Every revision of a rule lineage, oldest first."""
    request = rules_pb2.GetRuleHistoryRequest(principal=principal.to_proto(), lineage_id=lineage_id)
    reply: rules_pb2.RuleHistory = await backend.rules.GetRuleHistory(request, timeout=backend.timeout_s)
    return reply


async def create_category(
    backend: Backends, principal: Principal, body: ProposeCategoryRequest, idempotency_key: str = ""
) -> rules_pb2.Category:
    """Add a category to the registry; an admin's (``AdminCategoryIn``) may be locked from graduating."""
    request = rules_pb2.CreateCategoryRequest(
        principal=principal.to_proto(),
        name=body.name,
        description=body.description,
        scope=category_scope(body.scope),
        never_graduate=isinstance(body, AdminCategoryIn) and body.never_graduate,
        idempotency_key=idempotency_key,
    )
    reply: rules_pb2.Category = await backend.rules.CreateCategory(request, timeout=backend.timeout_s)
    return reply


async def merge_categories(
    backend: Backends,
    principal: Principal,
    category_id: str,
    body: MergeCategoriesRequest,
    idempotency_key: str = "",
) -> rules_pb2.MergeCategoriesResponse:
    """Merge ``category_id`` (retired) into ``body.into_category_id``, moving its rules and drafts."""
    request = rules_pb2.MergeCategoriesRequest(
        principal=principal.to_proto(),
        category_id=category_id,
        into_category_id=body.into_category_id,
        rationale=body.rationale,
        idempotency_key=idempotency_key,
    )
    reply: rules_pb2.MergeCategoriesResponse = await backend.rules.MergeCategories(
        request, timeout=backend.timeout_s
    )
    return reply


async def graduation_status(
    backend: Backends, principal: Principal, category_id: str
) -> rules_pb2.GraduationStatus:
    """A category's progress toward its next rung."""
    request = rules_pb2.GetGraduationStatusRequest(principal=principal.to_proto(), category_id=category_id)
    reply: rules_pb2.GraduationStatus = await backend.rules.GetGraduationStatus(
        request, timeout=backend.timeout_s
    )
    return reply


async def graduate(
    backend: Backends, principal: Principal, category_id: str, body: GraduateIn
) -> rules_pb2.Category:
    """A human sets a category's rung: one up (through the maturity gate), or any down."""
    request = rules_pb2.GraduateRequest(
        principal=principal.to_proto(), category_id=category_id, to_state=body.to_state
    )
    reply: rules_pb2.Category = await backend.rules.Graduate(request, timeout=backend.timeout_s)
    return reply


async def graduation_proposals(
    backend: Backends, principal: Principal, category_id: str = ""
) -> rules_pb2.ListGraduationProposalsResponse:
    """Graduation proposals, newest first: the project's, or one category's."""
    request = rules_pb2.ListGraduationProposalsRequest(
        principal=principal.to_proto(), category_id=category_id
    )
    reply: rules_pb2.ListGraduationProposalsResponse = await backend.rules.ListGraduationProposals(
        request, timeout=backend.timeout_s
    )
    return reply


async def reject_graduation_proposal(
    backend: Backends, principal: Principal, proposal_id: str, body: RejectProposalIn
) -> rules_pb2.GraduationProposal:
    """Close a waiting proposal with the reason its agent reads verbatim."""
    request = rules_pb2.RejectGraduationProposalRequest(
        principal=principal.to_proto(), proposal_id=proposal_id, reason=body.reason
    )
    reply: rules_pb2.GraduationProposal = await backend.rules.RejectGraduationProposal(
        request, timeout=backend.timeout_s
    )
    return reply


async def set_risk_dial(backend: Backends, principal: Principal, body: RiskDialIn) -> rules_pb2.RiskDial:
    """Account fields merge (``null`` resets one); each listed category's overrides are replaced."""
    request = rules_pb2.SetRiskDialRequest(principal=principal.to_proto())
    if body.account is not None:
        values, cleared = risk_values(body.account)
        request.account.CopyFrom(values)
        request.account_clear.extend(cleared)
    for entry in body.categories:
        values, inherited = risk_values(entry)
        request.categories.append(
            rules_pb2.CategoryRisk(category_id=entry.category_id, overrides=values, inherit_fields=inherited)
        )
    reply: rules_pb2.RiskDial = await backend.rules.SetRiskDial(request, timeout=backend.timeout_s)
    return reply


async def pacing_settings(backend: Backends, principal: Principal) -> rules_pb2.PacingSettings:
    """The project's backlog pacing values in force."""
    request = rules_pb2.GetPacingSettingsRequest(principal=principal.to_proto())
    reply: rules_pb2.PacingSettings = await backend.rules.GetPacingSettings(
        request, timeout=backend.timeout_s
    )
    return reply


async def set_pacing_settings(
    backend: Backends, principal: Principal, body: PacingSettingsIn
) -> rules_pb2.PacingSettings:
    """A field set to ``null`` returns to its default; an absent one is untouched."""
    request = rules_pb2.SetPacingSettingsRequest(principal=principal.to_proto())
    for name in body.model_fields_set:
        value = getattr(body, name)
        if value is None:
            request.clear.append(name)
        else:
            setattr(request.values, name, value)
    reply: rules_pb2.PacingSettings = await backend.rules.SetPacingSettings(
        request, timeout=backend.timeout_s
    )
    return reply
