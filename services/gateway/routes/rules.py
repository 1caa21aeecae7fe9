"""The rules routes: get_rules, save_rule, categories, graduation, the risk dial (and their console verbs)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from reviewloop.errors import Code, DomainError
from reviewloop.rules.v1 import rules_pb2
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import select

from gateway import store
from gateway.auth import ANY_PROJECT_KEY, Caller, admin_actor_id, check_org, console_principal, require_admin
from gateway.backends import Backends, backends
from gateway.translate import INT32_MAX, INT64_MAX, timestamp

router = APIRouter(tags=["rules"])
Backend = Annotated[Backends, Depends(backends)]
ProjectKey = Annotated[Principal, Depends(ANY_PROJECT_KEY)]
Admin = Annotated[Caller, Depends(require_admin)]
IdempotencyKey = Annotated[str, Header(alias="Idempotency-Key", max_length=255)]

DIAL_FIELDS = (
    "min_confidence",
    "first_contact_gate",
    "drift_demote_after",
    "canary_rate",
    "graduate_min_approvals",
    "graduate_min_age_hours",
    "auto_send_cap_per_day",
)
MAX_RULE_TEXT = 20_000  # the service lints the real limit and says so; this only bounds the body


# --- JSON shapes (spec 000) --------------------------------------------------------------------


def _number(value: float) -> float | int:
    """48.0 reads as 48, as the spec's examples write whole hours."""
    return int(value) if float(value).is_integer() else value


def rule_json(rule: rules_pb2.Rule) -> dict[str, Any]:
    """The spec's Rule; optional ids (project of a house-style rule, category of a general rule,
    source review, per-agent agent) are omitted when absent."""
    body: dict[str, Any] = {
        "id": rule.id,
        "lineage_id": rule.lineage_id,
        "rev": rule.rev,
        "rule_layer": rule.rule_layer,
    }
    body["org_id"] = rule.org_id
    if rule.project_id:
        body["project_id"] = rule.project_id
    body["scope"] = rule.scope
    if rule.category_id:
        body["category_id"] = rule.category_id
    body.update(kind=rule.kind, priority=rule.priority, rule_text=rule.rule_text)
    if rule.source_review_id:
        body["source_review_id"] = rule.source_review_id
    body.update(author_kind=rule.author_kind, status=rule.status)
    if rule.agent_id:
        body["agent_id"] = rule.agent_id
    return body


def revision_json(rule: rules_pb2.Rule) -> dict[str, Any]:
    """A history entry: the rule as it was, plus the audit facts of the change."""
    body = rule_json(rule)
    body.update(action=rule.action, changed_by_kind=rule.changed_by_kind, changed_by_id=rule.changed_by_id)
    if rule.supersedes_id:
        body["supersedes_id"] = rule.supersedes_id
    if rule.high_water:
        body["rule_high_water"] = rule.high_water
    body["created_at"] = timestamp(rule.created_at)
    return body


def category_json(category: rules_pb2.Category) -> dict[str, Any]:
    return {
        "id": category.id,
        "name": category.name,
        "description": category.description,
        "scope": category.scope,
        "state": category.state,
        "author_kind": category.author_kind,
        "rule_high_water": category.rule_high_water,
        "rules_version": category.rules_version,
        "never_graduate": category.never_graduate,
        "clean_approval_count": category.clean_approval_count,
        "drift_count": category.drift_count,
    }


def graduation_json(status: rules_pb2.GraduationStatus) -> dict[str, Any]:
    body: dict[str, Any] = {"category_id": status.category_id, "state": status.state}
    if status.next_state:
        body["next_state"] = status.next_state
    body.update(
        never_graduate=status.never_graduate,
        clean_approval_count=status.clean_approval_count,
        graduate_min_approvals=status.graduate_min_approvals,
        approvals_met=status.approvals_met,
        age_hours=status.age_hours,
        graduate_min_age_hours=_number(status.graduate_min_age_hours),
        age_met=status.age_met,
        maturity_gate_met=status.maturity_gate_met,
        drift_count=status.drift_count,
        drift_demote_after=status.drift_demote_after,
        can_graduate=status.can_graduate,
    )
    return body


def _values_json(values: rules_pb2.RiskValues) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in DIAL_FIELDS:
        if values.HasField(name):  # type: ignore[arg-type]
            value = getattr(values, name)
            out[name] = (
                _number(value) if isinstance(value, float) and name == "graduate_min_age_hours" else value
            )
    return out


def risk_dial_json(dial: rules_pb2.RiskDial) -> dict[str, Any]:
    categories = []
    for entry in dial.categories:
        written = _values_json(entry.overrides)
        item: dict[str, Any] = {"category_id": entry.category_id}
        for name in DIAL_FIELDS:  # as the console wrote them: set values, and explicit nulls
            if name in written:
                item[name] = written[name]
            elif name in entry.inherit_fields:
                item[name] = None
        item["effective"] = _values_json(entry.effective)
        categories.append(item)
    return {"account": _values_json(dial.account), "categories": categories}


# --- agent plane -------------------------------------------------------------------------------


class RuleIn(BaseModel):
    """save_rule: a new lineage, or a revision of one naming the rev it read."""

    model_config = ConfigDict(extra="forbid")
    rule_text: str = Field(max_length=MAX_RULE_TEXT)
    scope: str = Field(default="", max_length=16)
    category_id: str = Field(default="", max_length=40)
    kind: str = Field(default="", max_length=16)
    priority: int = Field(default=0, ge=-INT32_MAX, le=INT32_MAX)
    lineage_id: str = Field(default="", max_length=40)
    expected_rev: int = Field(default=0, ge=0, le=INT64_MAX)
    source_review_id: str = Field(default="", max_length=40)
    agent_id: str = Field(default="", max_length=40)


class CategoryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=1000)
    description: str = Field(default="", max_length=10_000)
    scope: str = Field(default="", max_length=16)


class ProposalIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to_state: str = Field(default="", max_length=16)
    note: str = Field(default="", max_length=10_000)


def _save_request(
    principal: Principal, body: RuleIn, layer: str, idempotency_key: str
) -> rules_pb2.SaveRuleRequest:
    return rules_pb2.SaveRuleRequest(
        principal=principal.to_proto(),
        rule_text=body.rule_text,
        scope=body.scope,
        category_id=body.category_id,
        kind=body.kind,
        priority=body.priority,
        lineage_id=body.lineage_id,
        expected_rev=body.expected_rev,
        source_review_id=body.source_review_id,
        rule_layer=layer,
        agent_id=body.agent_id,
        idempotency_key=idempotency_key,
    )


@router.get("/v1/rules", operation_id="get_rules")
async def get_rules(
    principal: ProjectKey,
    backend: Backend,
    scope: Annotated[str, Query(max_length=16)] = "",
    category_id: Annotated[str, Query(max_length=40)] = "",
    agent_id: Annotated[str, Query(max_length=40)] = "",
    status: Annotated[str, Query(max_length=16)] = "",
) -> dict[str, Any]:
    """The effective rule stack, ladder applied. Unfiltered (no scope or status), it also carries the
    versions, the rule high-water and a composition token to submit drafts with."""
    reply = await backend.rules.GetRules(
        rules_pb2.GetRulesRequest(
            principal=principal.to_proto(),
            scope=scope,
            category_id=category_id,
            agent_id=agent_id,
            status=status,
        ),
        timeout=backend.timeout_s,
    )
    body: dict[str, Any] = {"rules": [rule_json(r) for r in reply.rules], "next_cursor": None}
    if reply.composition_token:
        body.update(
            house_style_version=reply.house_style_version,
            category_rules_version=reply.category_rules_version,
            rule_high_water=reply.rule_high_water,
            composition_token=reply.composition_token,
            composition_token_expires_at=timestamp(reply.composition_token_expires_at),
        )
    return body


@router.post("/v1/rules", status_code=201, operation_id="save_rule")
async def save_rule(
    body: RuleIn, principal: ProjectKey, backend: Backend, idempotency_key: IdempotencyKey = ""
) -> dict[str, Any]:
    """Save a project-layer rule, or revise one (``lineage_id`` + the ``expected_rev`` you read)."""
    reply = await backend.rules.SaveRule(
        _save_request(principal, body, "project", idempotency_key), timeout=backend.timeout_s
    )
    return rule_json(reply)


@router.get("/v1/rules/{lineage_id}/history", operation_id="get_rule_history")
async def get_rule_history(lineage_id: str, principal: ProjectKey, backend: Backend) -> dict[str, Any]:
    """Every revision of a rule lineage, oldest first: the audit log."""
    reply = await backend.rules.GetRuleHistory(
        rules_pb2.GetRuleHistoryRequest(principal=principal.to_proto(), lineage_id=lineage_id),
        timeout=backend.timeout_s,
    )
    return {"lineage_id": reply.lineage_id, "revisions": [revision_json(r) for r in reply.revisions]}


@router.get("/v1/categories", operation_id="list_categories")
async def list_categories(
    principal: ProjectKey,
    backend: Backend,
    cursor: Annotated[str, Query(max_length=64)] = "",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    reply = await backend.rules.ListCategories(
        rules_pb2.ListCategoriesRequest(principal=principal.to_proto(), cursor=cursor, limit=limit),
        timeout=backend.timeout_s,
    )
    return {
        "categories": [category_json(c) for c in reply.categories],
        "next_cursor": reply.next_cursor or None,
    }


@router.post("/v1/categories", status_code=201, operation_id="create_category")
async def create_category(
    body: CategoryIn, principal: ProjectKey, backend: Backend, idempotency_key: IdempotencyKey = ""
) -> dict[str, Any]:
    """An agent adds a category to the registry (``author_kind: agent``)."""
    reply = await backend.rules.CreateCategory(
        rules_pb2.CreateCategoryRequest(
            principal=principal.to_proto(),
            name=body.name,
            description=body.description,
            scope=body.scope,
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return category_json(reply)


@router.get("/v1/categories/{category_id}/graduation", operation_id="get_graduation_status")
async def get_graduation_status(category_id: str, principal: ProjectKey, backend: Backend) -> dict[str, Any]:
    reply = await backend.rules.GetGraduationStatus(
        rules_pb2.GetGraduationStatusRequest(principal=principal.to_proto(), category_id=category_id),
        timeout=backend.timeout_s,
    )
    return graduation_json(reply)


def proposal_json(proposal: rules_pb2.GraduationProposal) -> dict[str, Any]:
    return {
        "id": proposal.id,
        "category_id": proposal.category_id,
        "from_state": proposal.from_state,
        "to_state": proposal.to_state,
        "proposed_by": proposal.proposed_by,
        "note": proposal.note,
        "status": proposal.status,
        "created_at": timestamp(proposal.created_at),
        "graduation": graduation_json(proposal.graduation),
    }


@router.post(
    "/v1/categories/{category_id}/graduation-proposals", status_code=201, operation_id="propose_graduation"
)
async def propose_graduation(
    category_id: str, body: ProposalIn, principal: ProjectKey, backend: Backend
) -> dict[str, Any]:
    """Propose the next rung; only a human flips it."""
    reply = await backend.rules.ProposeGraduation(
        rules_pb2.ProposeGraduationRequest(
            principal=principal.to_proto(), category_id=category_id, to_state=body.to_state, note=body.note
        ),
        timeout=backend.timeout_s,
    )
    return proposal_json(reply)


@router.get("/v1/risk-dial", operation_id="get_risk_dial")
async def get_risk_dial(
    principal: ProjectKey, backend: Backend, category_id: Annotated[str, Query(max_length=40)] = ""
) -> dict[str, Any]:
    reply = await backend.rules.GetRiskDial(
        rules_pb2.GetRiskDialRequest(principal=principal.to_proto(), category_id=category_id),
        timeout=backend.timeout_s,
    )
    return risk_dial_json(reply)


# --- console -----------------------------------------------------------------------------------


async def _org_principal(caller: Caller, request: Request, org_id: str) -> Principal:
    """An admin principal for org-level work: the admin key's own project, or (bootstrap token) any
    project of the org, since every service scopes a principal to a project."""
    check_org(caller, org_id)
    if caller.principal is not None:
        return Principal(org_id, caller.principal.project_id, ActorKind.ADMIN, admin_actor_id(caller))
    async with request.app.state.db.engine.connect() as conn:
        row = (
            await conn.execute(
                select(store.projects.c.project_id).where(store.projects.c.org_id == org_id).limit(1)
            )
        ).first()
    if row is None:
        raise DomainError(Code.NOT_FOUND, f"No org {org_id}.")
    return Principal(org_id, row.project_id, ActorKind.ADMIN, admin_actor_id(caller))


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
    return await _org_principal(caller, request, reply.org_id)


class HouseRuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule_text: str = Field(max_length=MAX_RULE_TEXT)
    kind: str = Field(default="", max_length=16)
    priority: int = Field(default=0, ge=-INT32_MAX, le=INT32_MAX)
    lineage_id: str = Field(default="", max_length=40)
    expected_rev: int = Field(default=0, ge=0, le=INT64_MAX)


class AdminCategoryIn(CategoryIn):
    never_graduate: bool = False


class CategoryPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, max_length=1000)
    description: str | None = Field(default=None, max_length=10_000)
    never_graduate: bool | None = None


class GraduateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to_state: str = Field(max_length=16)


class DialValues(BaseModel):
    """Dial fields; an absent field is untouched, ``null`` inherits (or resets the account's)."""

    model_config = ConfigDict(extra="forbid")
    min_confidence: float | None = None
    first_contact_gate: bool | None = None
    drift_demote_after: int | None = Field(default=None, le=INT32_MAX)
    canary_rate: float | None = None
    graduate_min_approvals: int | None = Field(default=None, le=INT32_MAX)
    graduate_min_age_hours: float | None = None
    auto_send_cap_per_day: int | None = Field(default=None, le=INT32_MAX)

    def split(self) -> tuple[rules_pb2.RiskValues, list[str]]:
        """(the values set, the fields explicitly null)."""
        given = {name: getattr(self, name) for name in self.model_fields_set if name in DIAL_FIELDS}
        values = rules_pb2.RiskValues(**{k: v for k, v in given.items() if v is not None})
        return values, sorted((k for k, v in given.items() if v is None), key=DIAL_FIELDS.index)


class CategoryDialIn(DialValues):
    category_id: str = Field(max_length=40)


class RiskDialIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: DialValues | None = None
    categories: list[CategoryDialIn] = Field(default_factory=list, max_length=500)


class RuleSettingsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    write_approval: bool


class RevIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rev: int = Field(ge=1, le=INT64_MAX, description="The lineage's current rev, as you read it.")


@router.post(
    "/v1/admin/orgs/{org_id}/rules", status_code=201, tags=["console"], operation_id="save_house_style_rule"
)
async def save_house_style_rule(
    org_id: str,
    body: HouseRuleIn,
    caller: Admin,
    request: Request,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    """Org house style: inherited by every project of the org (console only)."""
    principal = await _org_principal(caller, request, org_id)
    rule = RuleIn(
        rule_text=body.rule_text,
        kind=body.kind,
        priority=body.priority,
        lineage_id=body.lineage_id,
        expected_rev=body.expected_rev,
    )
    reply = await backend.rules.SaveRule(
        _save_request(principal, rule, "org", idempotency_key), timeout=backend.timeout_s
    )
    return rule_json(reply)


async def _lineage_verb(
    verb: str, lineage_id: str, body: RevIn, caller: Caller, request: Request, backend: Backends
) -> dict[str, Any]:
    principal = await _owner_principal(caller, request, backend, lineage_id=lineage_id)
    call = getattr(backend.rules, verb)
    reply = await call(
        rules_pb2.RuleActionRequest(
            principal=principal.to_proto(), lineage_id=lineage_id, expected_rev=body.rev
        ),
        timeout=backend.timeout_s,
    )
    return rule_json(reply)


@router.post("/v1/admin/rules/{lineage_id}/undo", tags=["console"], operation_id="undo_rule")
async def undo_rule(
    lineage_id: str, body: RevIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    """Restore the revision in force before the last change (a new revision)."""
    return await _lineage_verb("UndoRule", lineage_id, body, caller, request, backend)


@router.post("/v1/admin/rules/{lineage_id}/approve", tags=["console"], operation_id="approve_rule")
async def approve_rule(
    lineage_id: str, body: RevIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    """Accept a proposed (staged) revision into the effective stack."""
    return await _lineage_verb("ApproveRule", lineage_id, body, caller, request, backend)


@router.post("/v1/admin/rules/{lineage_id}/reject", tags=["console"], operation_id="reject_rule")
async def reject_rule(
    lineage_id: str, body: RevIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    return await _lineage_verb("RejectRule", lineage_id, body, caller, request, backend)


@router.post("/v1/admin/rules/{lineage_id}/retire", tags=["console"], operation_id="retire_rule")
async def retire_rule(
    lineage_id: str, body: RevIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    return await _lineage_verb("RetireRule", lineage_id, body, caller, request, backend)


@router.post(
    "/v1/admin/projects/{project_id}/categories",
    status_code=201,
    tags=["console"],
    operation_id="predefine_category",
)
async def predefine_category(
    project_id: str,
    body: AdminCategoryIn,
    caller: Admin,
    request: Request,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> dict[str, Any]:
    principal = await console_principal(caller, request, project_id)
    reply = await backend.rules.CreateCategory(
        rules_pb2.CreateCategoryRequest(
            principal=principal.to_proto(),
            name=body.name,
            description=body.description,
            scope=body.scope,
            never_graduate=body.never_graduate,
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return category_json(reply)


@router.patch("/v1/admin/categories/{category_id}", tags=["console"], operation_id="update_category")
async def update_category(
    category_id: str, body: CategoryPatch, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    """Rename, redescribe, or set the never_graduate lock (ids never change)."""
    principal = await _owner_principal(caller, request, backend, category_id=category_id)
    patch = rules_pb2.UpdateCategoryRequest(principal=principal.to_proto(), category_id=category_id)
    if body.name is not None:
        patch.name = body.name
    if body.description is not None:
        patch.description = body.description
    if body.never_graduate is not None:
        patch.never_graduate = body.never_graduate
    return category_json(await backend.rules.UpdateCategory(patch, timeout=backend.timeout_s))


@router.post(
    "/v1/admin/categories/{category_id}/graduate", tags=["console"], operation_id="graduate_category"
)
async def graduate_category(
    category_id: str, body: GraduateIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    """A human flips the rung: one up (auto_silent through the maturity gate), or any down."""
    principal = await _owner_principal(caller, request, backend, category_id=category_id)
    reply = await backend.rules.Graduate(
        rules_pb2.GraduateRequest(
            principal=principal.to_proto(), category_id=category_id, to_state=body.to_state
        ),
        timeout=backend.timeout_s,
    )
    return category_json(reply)


@router.get(
    "/v1/admin/projects/{project_id}/graduation-proposals",
    tags=["console"],
    operation_id="list_graduation_proposals",
)
async def list_graduation_proposals(
    project_id: str, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    """The proposals waiting for a human, newest first, each with its category's graduation status."""
    principal = await console_principal(caller, request, project_id)
    reply = await backend.rules.ListGraduationProposals(
        rules_pb2.ListGraduationProposalsRequest(principal=principal.to_proto()),
        timeout=backend.timeout_s,
    )
    return {"proposals": [proposal_json(p) for p in reply.proposals]}


@router.put("/v1/admin/projects/{project_id}/risk-dial", tags=["console"], operation_id="set_risk_dial")
async def set_risk_dial(
    project_id: str, body: RiskDialIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    """Account fields merge (``null`` resets one); each listed category's overrides are replaced."""
    principal = await console_principal(caller, request, project_id)
    message = rules_pb2.SetRiskDialRequest(principal=principal.to_proto())
    if body.account is not None:
        values, cleared = body.account.split()
        message.account.CopyFrom(values)
        message.account_clear.extend(cleared)
    for entry in body.categories:
        values, inherited = entry.split()
        message.categories.append(
            rules_pb2.CategoryRisk(category_id=entry.category_id, overrides=values, inherit_fields=inherited)
        )
    return risk_dial_json(await backend.rules.SetRiskDial(message, timeout=backend.timeout_s))


@router.get(
    "/v1/admin/projects/{project_id}/rule-settings", tags=["console"], operation_id="get_rule_settings"
)
async def get_rule_settings(
    project_id: str, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    principal = await console_principal(caller, request, project_id)
    reply = await backend.rules.GetRuleSettings(
        rules_pb2.GetRuleSettingsRequest(principal=principal.to_proto()), timeout=backend.timeout_s
    )
    return {"project_id": reply.project_id, "write_approval": reply.write_approval}


@router.put(
    "/v1/admin/projects/{project_id}/rule-settings", tags=["console"], operation_id="set_rule_settings"
)
async def set_rule_settings(
    project_id: str, body: RuleSettingsIn, caller: Admin, request: Request, backend: Backend
) -> dict[str, Any]:
    """``write_approval``: agent-authored rules are born ``proposed`` and wait for a human."""
    principal = await console_principal(caller, request, project_id)
    reply = await backend.rules.SetRuleSettings(
        rules_pb2.SetRuleSettingsRequest(principal=principal.to_proto(), write_approval=body.write_approval),
        timeout=backend.timeout_s,
    )
    return {"project_id": reply.project_id, "write_approval": reply.write_approval}


@router.post("/v1/admin/composition-keys/rotate", tags=["console"], operation_id="rotate_composition_key")
async def rotate_composition_key(caller: Admin, backend: Backend) -> dict[str, Any]:
    """A new signing key for composition tokens (operator only: the key serves every org)."""
    if caller.principal is not None:
        raise DomainError(Code.FORBIDDEN_ACTOR, "Rotating the signing key takes the bootstrap admin token.")
    operator = Principal("*", "*", ActorKind.ADMIN, "bootstrap")
    reply = await backend.rules.RotateCompositionKey(
        rules_pb2.RotateCompositionKeyRequest(principal=operator.to_proto()), timeout=backend.timeout_s
    )
    return {"key_id": reply.key_id}
