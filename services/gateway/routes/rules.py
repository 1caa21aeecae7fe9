"""The rules routes of the agent plane: get_rules, save_rule, categories, graduation and the risk dial. (Their
console verbs are in ``routes/admin/rules``.)"""

from __future__ import annotations

import asyncio
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Header, Query
from reviewloop.errors import invalid
from reviewloop.ids import id_pattern
from reviewloop.review.v1 import review_pb2
from reviewloop.rules.v1 import rules_pb2
from reviewloop.shapes import (
    Category,
    CategoryAudit,
    CategoryList,
    CategoryMerge,
    CategoryPacingState,
    DialEffect,
    GraduationProposalList,
    GraduationStatus,
    LearnReviewRuleRequest,
    MergeCategoriesRequest,
    PromoteRuleRequest,
    ProposeCategoryRequest,
    ProposeGraduationRequest,
    RevIn,
    RiskDial,
    Rule,
    RuleAudit,
    RuleHistory,
    RuleSnapshot,
    SaveRuleRequest,
    ScanBacklogStatus,
    UpdateCategoryRequest,
)
from reviewloop.tenancy import Principal

from gateway.auth import ANY_PROJECT_KEY
from gateway.backends import Backends, backends
from gateway.commands import reviews
from gateway.commands import rules as commands
from gateway.commands.rules import RuleAction
from gateway.responses import OrjsonResponse, ShapedRoute, encoded
from gateway.translate import Json, page
from gateway.translate.rules import (
    as_backlog_status,
    as_category,
    as_category_audit,
    as_category_merge,
    as_dial_effect,
    as_graduation_proposal,
    as_graduation_status,
    as_pacing_state,
    as_risk_dial,
    as_rule,
    as_rule_audit,
    as_rule_list,
    as_rule_revision,
)

router = APIRouter(tags=["rules"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]
ProjectKey = Annotated[Principal, Depends(ANY_PROJECT_KEY)]
IdempotencyKey = Annotated[str, Header(alias="Idempotency-Key", max_length=255)]


def save_request(
    principal: Principal, body: SaveRuleRequest, layer: str, idempotency_key: str
) -> rules_pb2.SaveRuleRequest:
    if body.agent_id and body.scope_agent_id and body.agent_id != body.scope_agent_id:
        raise invalid("/scope_agent_id", "is the SDK's name for agent_id; give one of the two")
    return rules_pb2.SaveRuleRequest(
        principal=principal.to_proto(),
        rule_text=body.rule_text,
        scope=body.scope,
        category_id=body.category_id,
        kind=body.kind,
        priority=body.priority,
        lineage_id=body.lineage_id,
        expected_rev=body.expected_rev,
        supersedes_id=body.supersedes_id,
        source_review_id=body.source_review_id,
        source_turn_id=body.source_turn_id,
        rule_layer=layer,
        agent_id=body.agent_id or body.scope_agent_id,
        idempotency_key=idempotency_key,
        propagate_to_pending=body.propagate_to_pending,
        suggested_batch=body.suggested_batch,
    )


async def _turn_of(
    backend: Backends, principal: Principal, review_id: str, turn_id: str
) -> review_pb2.Review:
    """The review (``404`` unless the caller's project sees it), checked to hold ``turn_id`` when given:
    the rules context stores a rule's source turn, review_state owns the turns."""
    review = await reviews.get_review(backend, principal, review_id)
    if turn_id and turn_id not in {turn.id for turn in review.turns}:
        raise invalid("/source_turn_id", f"is not a turn of review {review.id}")
    return review


@router.get("/v1/rules", operation_id="get_rules", response_model=RuleSnapshot)
async def get_rules(
    principal: ProjectKey,
    backend: Backend,
    scope: Annotated[str, Query(max_length=16, pattern="^(general|category)?$")] = "",
    category_id: Annotated[str, Query(max_length=40)] = "",
    agent_id: Annotated[str, Query(max_length=40)] = "",
    status: Annotated[
        str,
        Query(max_length=16, pattern="^(proposed)?$", description="proposed: the rules awaiting approval"),
    ] = "",
) -> OrjsonResponse:
    """The effective rule stack, ladder applied. Unfiltered (no scope or status), it also carries the
    versions, the rule high-water and a composition token to submit drafts with."""
    reply = await commands.get_rules(
        backend, principal, scope=scope, category_id=category_id, agent_id=agent_id, status=status
    )
    return encoded(as_rule_list(reply))


@router.post("/v1/rules", status_code=201, operation_id="save_rule", response_model=Rule)
async def save_rule(
    body: SaveRuleRequest, principal: ProjectKey, backend: Backend, idempotency_key: IdempotencyKey = ""
) -> Json:
    """Save a project-layer rule, or revise one: name the revision it replaces (``supersedes_id``, the SDK's
    way) or its ``lineage_id`` + the ``expected_rev`` you read; either is a compare-and-set, so a revision that
    is no longer the lineage's current one is 409 ``stale`` with nothing written. A per-agent
    rule names its agent (``scope_agent_id``; an agent key, itself); ``source_turn_id`` names the turn of
    ``source_review_id`` the rule was learnt from."""
    if body.source_turn_id:
        if not body.source_review_id:
            raise invalid("/source_review_id", "name the review whose turn source_turn_id is")
        await _turn_of(backend, principal, body.source_review_id, body.source_turn_id)
    reply = await backend.rules.SaveRule(
        save_request(principal, body, "project", idempotency_key), timeout=backend.timeout_s
    )
    return as_rule(reply)


@router.post(
    "/v1/reviews/{review_id}/rules", status_code=201, operation_id="learn_review_rule", response_model=Rule
)
async def learn_review_rule(
    review_id: str,
    body: LearnReviewRuleRequest,
    principal: ProjectKey,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """Save a project rule learnt from a review's diff and comments (``source_review_id`` is the review;
    ``turn_id``, when given, must be one of its turns). Scope defaults to the review's category."""
    review = await reviews.get_review(backend, principal, review_id)
    if body.turn_id and body.turn_id not in {turn.id for turn in review.turns}:
        raise invalid("/turn_id", f"is not a turn of review {review.id}")
    scope = body.scope or ("category" if review.category_id else "general")
    rule = SaveRuleRequest(
        rule_text=body.rule_text,
        scope=scope,
        category_id=body.category_id or (review.category_id if scope == "category" else ""),
        kind=body.kind,
        source_review_id=review.id,
        source_turn_id=body.turn_id,
    )
    reply = await backend.rules.SaveRule(
        save_request(principal, rule, "project", idempotency_key), timeout=backend.timeout_s
    )
    return as_rule(reply)


@router.get("/v1/rules/{lineage_id}/history", operation_id="get_rule_history", response_model=RuleHistory)
async def get_rule_history(lineage_id: str, principal: ProjectKey, backend: Backend) -> OrjsonResponse:
    """Every revision of a rule lineage, oldest first: the audit log."""
    reply = await commands.rule_history(backend, principal, lineage_id)
    return encoded(
        {"lineage_id": reply.lineage_id, "revisions": [as_rule_revision(r) for r in reply.revisions]}
    )


@router.get("/v1/rules/{lineage_id}/audit", operation_id="get_rule_audit", response_model=RuleAudit)
async def get_rule_audit(lineage_id: str, principal: ProjectKey, backend: Backend) -> OrjsonResponse:
    """The catalog's audit read of a rule lineage: each change, who made it, before and after, and
    whether an undo took it back (the same facts as ``get_rule_history``)."""
    reply = await commands.rule_history(backend, principal, lineage_id)
    return encoded(as_rule_audit(reply))


@router.post("/v1/rules/{lineage_id}/retire", operation_id="retire_project_rule", response_model=Rule)
async def retire_project_rule(
    lineage_id: str,
    body: RevIn,
    principal: ProjectKey,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """Retire a project rule (the catalog's ``retire_rule``), naming the rev you read (a stale rev is a
    409). Org house style, and every retire under staged approval, are the console's (403)."""
    return as_rule(
        await commands.lineage_verb(
            backend, principal, RuleAction("RetireRule", lineage_id, body.rev, idempotency_key)
        )
    )


@router.post("/v1/rules/{lineage_id}/undo", operation_id="undo_rule_change", response_model=Rule)
async def undo_rule_change(
    lineage_id: str,
    body: RevIn,
    principal: ProjectKey,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """Restore the revision of a project rule in force before its last change (a new revision; undoing
    a creation retires the rule), naming the rev you read. Same authority as ``retire_rule``."""
    return as_rule(
        await commands.lineage_verb(
            backend, principal, RuleAction("UndoRule", lineage_id, body.rev, idempotency_key)
        )
    )


@router.post("/v1/rules/{lineage_id}/promote", operation_id="promote_rule", response_model=Rule)
async def promote_rule(
    lineage_id: str,
    body: PromoteRuleRequest,
    principal: ProjectKey,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """Promote a rule (a new revision of its lineage), naming the rev you read: an active category rule
    becomes general (``category -> general``; same authority as ``retire_rule``), or with ``to_layer: org``
    an active project rule becomes org house style (``project -> org``; console authority, an admin key:
    any other key is 403 ``forbidden_scope``)."""
    layer = "" if body.to_layer == "project" else body.to_layer
    return as_rule(
        await commands.lineage_verb(
            backend, principal, RuleAction("PromoteRule", lineage_id, body.rev, idempotency_key, layer)
        )
    )


@router.get("/v1/categories", operation_id="list_categories", response_model=CategoryList)
async def list_categories(
    principal: ProjectKey,
    backend: Backend,
    cursor: Annotated[str, Query(max_length=64, pattern=f"^({id_pattern('cat')})?$")] = "",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> OrjsonResponse:
    reply = await commands.list_categories(backend, principal, cursor=cursor, limit=limit)
    return encoded(page([as_category(c) for c in reply.categories], reply.next_cursor, reply.total))


@router.get("/v1/categories/{category_id}", operation_id="get_category", response_model=Category)
async def get_category(category_id: str, principal: ProjectKey, backend: Backend) -> Json:
    """One category of the registry (the catalog's ``get_category``); another project's is 404."""
    reply = await backend.rules.GetCategory(
        rules_pb2.GetCategoryRequest(principal=principal.to_proto(), category_id=category_id),
        timeout=backend.timeout_s,
    )
    return as_category(reply)


@router.post(
    "/v1/categories/{category_id}/merge", operation_id="merge_categories", response_model=CategoryMerge
)
async def merge_categories(
    category_id: str,
    body: MergeCategoriesRequest,
    principal: ProjectKey,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """Merge this category into ``into_category_id``: its live rules move there (a twin of one already
    there is retired), its pending drafts move there and each gets a ``recheck_category`` nudge (reason
    ``merged``), and it is retired (``merged_into``; list_categories no longer shows it). The merge is
    recorded with its ``rationale`` (``audit``; ``get_category_audit`` lists it). An agent merges only
    young duplicates: both agent-authored, shared, supervised, under 24 hours old, governed alike and used
    by its project alone; anything else is 403 ``forbidden_scope`` with the limit as ``reason`` and takes
    an admin key. Repeating a merge answers it again; a side already merged elsewhere is 409 ``conflict``
    naming ``merged_into``."""
    reply = await commands.merge_categories(backend, principal, category_id, body, idempotency_key)
    return as_category_merge(reply)


@router.get(
    "/v1/categories/{category_id}/audit", operation_id="get_category_audit", response_model=CategoryAudit
)
async def get_category_audit(category_id: str, principal: ProjectKey, backend: Backend) -> Json:
    """The merges this category took part in (merged away or merged into), oldest first: who, when, from,
    into, the rationale, and the rules moved and retired."""
    reply = await backend.rules.GetCategoryAudit(
        rules_pb2.GetCategoryAuditRequest(principal=principal.to_proto(), category_id=category_id),
        timeout=backend.timeout_s,
    )
    return as_category_audit(reply)


@router.patch("/v1/categories/{category_id}", operation_id="update_project_category", response_model=Category)
async def update_project_category(
    category_id: str, body: UpdateCategoryRequest, principal: ProjectKey, backend: Backend
) -> Json:
    """Rename or redescribe a category (the catalog's ``update_category``; ids never change). The
    ``never_graduate`` lock is the console's (403)."""
    return as_category(await commands.update_category(backend, principal, category_id, body))


@router.get(
    "/v1/categories/{category_id}/backlog",
    operation_id="get_backlog_status",
    response_model=ScanBacklogStatus,
)
async def get_backlog_status(category_id: str, principal: ProjectKey, backend: Backend) -> Json:
    """How many of the category's queued drafts were composed under the rules in force, and how many are
    stale (composed under an older rule high-water: redraft them, or restamp the ones that need no change);
    how many stale drafts are nudged and awaiting their redraft (``in_flight``) and which come next.
    Read-only; it counts down as drafts are redrafted, restamped, decided or cancelled."""
    category, rules, pacing = await asyncio.gather(
        backend.rules.GetCategory(
            rules_pb2.GetCategoryRequest(principal=principal.to_proto(), category_id=category_id),
            timeout=backend.timeout_s,
        ),
        commands.get_rules(backend, principal, category_id=category_id),
        _pacing(principal, backend, category_id),
    )
    return as_backlog_status(category, rules, pacing)


async def _pacing(principal: Principal, backend: Backends, category_id: str) -> review_pb2.PacingState:
    return await reviews.pacing_state(backend, principal, category_id)


@router.get(
    "/v1/categories/{category_id}/pacing",
    operation_id="get_pacing_state",
    response_model=CategoryPacingState,
)
async def get_pacing_state(category_id: str, principal: ProjectKey, backend: Backend) -> Json:
    """How the category's stale drafts are being worked through after a rule change: at most
    ``lookahead_window`` nudged at a time (``in_window_redrafting``), the rest ``ahead`` in order
    (``next_review_ids`` first); a redraft or honest restamp of a nudged draft opens the next slot.
    Read-only."""
    category_request = rules_pb2.GetCategoryRequest(principal=principal.to_proto(), category_id=category_id)
    await backend.rules.GetCategory(category_request, timeout=backend.timeout_s)  # 404 across tenants
    settings, pacing = await asyncio.gather(
        commands.pacing_settings(backend, principal),
        _pacing(principal, backend, category_id),
    )
    return as_pacing_state(settings, pacing)


@router.post("/v1/categories", status_code=201, operation_id="create_category", response_model=Category)
async def create_category(
    body: ProposeCategoryRequest,
    principal: ProjectKey,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """An agent adds a category to the registry (``author_kind: agent``)."""
    return as_category(await commands.create_category(backend, principal, body, idempotency_key))


@router.get(
    "/v1/categories/{category_id}/graduation",
    operation_id="get_graduation_status",
    response_model=GraduationStatus,
)
async def get_graduation_status(category_id: str, principal: ProjectKey, backend: Backend) -> Json:
    return as_graduation_status(await commands.graduation_status(backend, principal, category_id))


@router.post(
    "/v1/categories/{category_id}/graduation-proposals",
    status_code=201,
    operation_id="propose_graduation",
    response_model=GraduationStatus,
)
async def propose_graduation(
    category_id: str,
    body: ProposeGraduationRequest,
    principal: ProjectKey,
    backend: Backend,
    idempotency_key: IdempotencyKey = "",
) -> Json:
    """Propose the next rung (``to_state``, default the next one) with a ``note`` and the SDK's opaque
    ``evidence`` for the human; only a human flips it. Answers the category's graduation status, as the SDK
    reads it; the proposal itself, and how a human decided it, are in
    ``list_graduation_proposals_of_category`` (newest first). A retry with the same Idempotency-Key records
    no second proposal."""
    reply = await backend.rules.ProposeGraduation(
        rules_pb2.ProposeGraduationRequest(
            principal=principal.to_proto(),
            category_id=category_id,
            to_state=body.to_state,
            note=body.note,
            evidence_json=orjson.dumps(body.evidence).decode() if body.evidence is not None else "",
            idempotency_key=idempotency_key,
        ),
        timeout=backend.timeout_s,
    )
    return as_graduation_status(reply.graduation)


@router.get(
    "/v1/categories/{category_id}/graduation-proposals",
    operation_id="list_graduation_proposals_of_category",
    response_model=GraduationProposalList,
)
async def list_graduation_proposals_of_category(
    category_id: str, principal: ProjectKey, backend: Backend
) -> Json:
    """The category's graduation proposals, newest first, decided ones included: how the agent learns
    a human approved (graduated) or rejected its proposal, and the reason, verbatim."""
    reply = await commands.graduation_proposals(backend, principal, category_id)
    return {"proposals": [as_graduation_proposal(p) for p in reply.proposals]}


@router.get("/v1/risk-dial", operation_id="get_risk_dial", response_model=RiskDial)
async def get_risk_dial(
    principal: ProjectKey, backend: Backend, category_id: Annotated[str, Query(max_length=40)] = ""
) -> Json:
    reply = await commands.risk_dial(backend, principal, category_id)
    return as_risk_dial(reply)


Unit = Annotated[float | None, Query(ge=0, le=1, allow_inf_nan=False)]


@router.get(
    "/v1/categories/{category_id}/dial-effect",
    operation_id="get_dial_effect",
    response_model=DialEffect,
)
async def get_dial_effect(
    category_id: str,
    principal: ProjectKey,
    backend: Backend,
    last: Annotated[int, Query(ge=1, le=1000)] = 200,
    min_confidence: Unit = None,
    first_contact_gate: bool | None = None,
    canary_rate: Unit = None,
    auto_send_cap_per_day: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
) -> Json:
    """A proposed risk dial against the one in force, replayed over the category's last drafts (a read)."""
    request = review_pb2.GetDialEffectRequest(
        principal=principal.to_proto(), category_id=category_id, last=last
    )
    for name, value in (
        ("min_confidence", min_confidence),
        ("first_contact_gate", first_contact_gate),
        ("canary_rate", canary_rate),
        ("auto_send_cap_per_day", auto_send_cap_per_day),
    ):
        if value is not None:
            setattr(request, name, value)
    return as_dial_effect(await backend.review.GetDialEffect(request, timeout=backend.timeout_s))
