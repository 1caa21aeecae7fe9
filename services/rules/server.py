"""The RulesService servicer: translate protobuf to the use cases' values, call ``app``, translate
the answer back. Nothing else lives here."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc
import orjson
from reviewloop import service
from reviewloop.common.v1 import common_pb2
from reviewloop.protoconv import stamp, to_enum
from reviewloop.rules.v1 import rules_pb2, rules_pb2_grpc
from reviewloop.service import Registration
from reviewloop.tenancy import Principal

from rules import app
from rules.domain import risk
from rules.domain.graduation import Status
from rules.domain.proposal import Change
from rules.store import CategoryMergeRow

# No RPC here reads its context: the boundary interceptor answers errors and the metadata.
Context = grpc.aio.ServicerContext[Any, Any]


def rule_to_proto(view: app.RuleView) -> rules_pb2.Rule:
    r = view.rule
    return rules_pb2.Rule(
        id=r.id,
        lineage_id=r.lineage_id,
        rev=r.rev,
        rule_layer=r.layer.value,
        org_id=r.org_id,
        project_id=r.project_id,
        scope=r.scope.value,
        category_id=r.category_id,
        kind=r.kind.value,
        priority=r.priority,
        rule_text=r.rule_text,
        source_review_id=r.source_review_id,
        author_kind=r.author_kind,
        status=view.status,
        agent_id=r.agent_id,
        supersedes_id=r.supersedes_id,
        created_at=stamp(r.created_at),
        action=r.action.value,
        changed_by_kind=r.changed_by_kind,
        changed_by_id=r.changed_by_id,
        high_water=r.high_water,
        source_turn_id=r.source_turn_id,
        updated_at=stamp(view.updated_at or r.created_at),
    )


def category_to_proto(view: app.CategoryView) -> rules_pb2.Category:
    c = view.row
    return rules_pb2.Category(
        id=c.id,
        name=c.name,
        description=c.description,
        scope=c.scope,
        state=c.state.value,
        author_kind=c.author_kind,
        rule_high_water=view.rule_high_water,
        rules_version=view.rules_version,
        never_graduate=c.never_graduate,
        clean_approval_count=c.clean_approval_count,
        drift_count=c.drift_count,
        org_id=c.org_id,
        project_id=c.project_id,
        created_at=stamp(c.created_at),
        merged_into=c.merged_into,
        created_by_agent_id=c.created_by_agent_id,
        updated_at=stamp(c.updated_at),
    )


def merge_to_proto(m: CategoryMergeRow) -> rules_pb2.CategoryMergeEntry:
    return rules_pb2.CategoryMergeEntry(
        id=m.id,
        category_id=m.category_id,
        into_category_id=m.into_category_id,
        rationale=m.rationale,
        actor_kind=m.actor_kind,
        actor_id=m.actor_id,
        rules_moved=m.rules_moved,
        rules_retired=m.rules_retired,
        created_at=stamp(m.created_at),
    )


def status_to_proto(s: Status) -> rules_pb2.GraduationStatus:
    return rules_pb2.GraduationStatus(
        category_id=s.category_id,
        state=s.state.value,
        next_state=s.next_state.value if s.next_state else "",
        never_graduate=s.never_graduate,
        clean_approval_count=s.clean_approval_count,
        graduate_min_approvals=s.graduate_min_approvals,
        approvals_met=s.approvals_met,
        age_hours=s.age_hours,
        graduate_min_age_hours=s.graduate_min_age_hours,
        age_met=s.age_met,
        maturity_gate_met=s.maturity_gate_met,
        drift_count=s.drift_count,
        drift_demote_after=s.drift_demote_after,
        can_graduate=s.can_graduate,
    )


def proposal_to_proto(proposal: app.Proposal) -> rules_pb2.GraduationProposal:
    message = rules_pb2.GraduationProposal(
        id=proposal.id,
        category_id=proposal.category_id,
        from_state=proposal.from_state,
        to_state=proposal.to_state,
        proposed_by=proposal.proposed_by,
        note=proposal.note,
        status=proposal.decision,
        graduation=status_to_proto(proposal.status),
        created_at=stamp(proposal.created_at),
        reason=proposal.reason,
        decided_by=proposal.decided_by,
        evidence_json=orjson.dumps(proposal.evidence).decode() if proposal.evidence is not None else "",
    )
    if proposal.decided_at is not None:
        message.decided_at.CopyFrom(stamp(proposal.decided_at))
    return message


def _values_to_proto(values: dict[str, Any]) -> rules_pb2.RiskValues:
    return rules_pb2.RiskValues(**{k: v for k, v in values.items() if v is not None})


def _values_from_proto(message: rules_pb2.RiskValues) -> dict[str, Any]:
    return {name: getattr(message, name) for name in risk.FIELDS if message.HasField(name)}  # type: ignore[arg-type]


def dial_to_proto(dial: app.Dial) -> rules_pb2.RiskDial:
    return rules_pb2.RiskDial(
        account=_values_to_proto(dial.account),
        categories=[
            rules_pb2.CategoryRisk(
                category_id=c.category_id,
                overrides=_values_to_proto(c.overrides),
                effective=_values_to_proto(c.effective),
                inherit_fields=[k for k, v in c.overrides.items() if v is None],
            )
            for c in dial.categories
        ],
    )


def _principal(request: Any) -> Principal:
    return Principal.from_proto(request.principal)


def _pacing(principal: Principal, values: dict[str, int]) -> rules_pb2.PacingSettings:
    return rules_pb2.PacingSettings(project_id=principal.project_id, values=rules_pb2.PacingValues(**values))


class RulesServicer(rules_pb2_grpc.RulesServiceServicer):
    def __init__(self, env: app.Env) -> None:
        self.env = env

    async def Ingest(self, request: common_pb2.IngestRequest, context: Context) -> common_pb2.IngestResponse:
        return await service.ingest(self.env.db, request, app.SUBSCRIPTIONS)

    async def ValidateCompositionToken(
        self, request: rules_pb2.ValidateCompositionTokenRequest, context: Context
    ) -> rules_pb2.ValidateCompositionTokenResponse:
        check = await app.validate_composition_token(
            self.env, _principal(request), request.composition_token, request.category_id
        )
        return rules_pb2.ValidateCompositionTokenResponse(
            status=rules_pb2.TokenStatus.ValueType(
                to_enum(rules_pb2.TokenStatus, "TOKEN_STATUS_", check.status)
            ),
            token_rule_high_water=check.token_rule_high_water,
            current_rule_high_water=check.current_rule_high_water,
        )

    async def GetCategory(
        self, request: rules_pb2.GetCategoryRequest, context: Context
    ) -> rules_pb2.Category:
        return category_to_proto(await app.get_category(self.env, _principal(request), request.category_id))

    async def GetRiskDial(
        self, request: rules_pb2.GetRiskDialRequest, context: Context
    ) -> rules_pb2.RiskDial:
        return dial_to_proto(await app.get_risk_dial(self.env, _principal(request), request.category_id))

    async def SaveRule(self, request: rules_pb2.SaveRuleRequest, context: Context) -> rules_pb2.Rule:
        body = app.RuleInput(
            rule_text=request.rule_text,
            scope=request.scope,
            category_id=request.category_id,
            kind=request.kind,
            priority=request.priority,
            lineage_id=request.lineage_id,
            expected_rev=request.expected_rev,
            supersedes_id=request.supersedes_id,
            source_review_id=request.source_review_id,
            source_turn_id=request.source_turn_id,
            rule_layer=request.rule_layer,
            agent_id=request.agent_id,
            idempotency_key=request.idempotency_key,
            rule_id=request.rule_id,
            dry_run=request.dry_run,
            propagate_to_pending=request.propagate_to_pending
            if request.HasField("propagate_to_pending")
            else True,
            suggested_batch=request.suggested_batch,
        )
        saved = await app.save_rule(self.env, _principal(request), body)
        return rules_pb2.Rule() if saved is None else rule_to_proto(saved)

    async def PreviewRule(
        self, request: rules_pb2.PreviewRuleRequest, context: Context
    ) -> rules_pb2.RulePreview:
        body = app.RuleInput(
            rule_text=request.rule_text,
            scope=request.scope,
            category_id=request.category_id,
            rule_layer=request.rule_layer,
            agent_id=request.agent_id,
        )
        changes = [Change(c.op, c.before, c.after) for c in request.changes]
        preview = await app.preview_rule(self.env, _principal(request), body, changes)
        return rules_pb2.RulePreview(
            proposed_text=preview.proposed_text,
            rule_text=preview.rule_text,
            conflicts=[rules_pb2.RuleConflict(rule=rule_to_proto(v), kind=k) for v, k in preview.conflicts],
        )

    async def GetRules(
        self, request: rules_pb2.GetRulesRequest, context: Context
    ) -> rules_pb2.GetRulesResponse:
        snapshot = await app.get_rules(
            self.env,
            _principal(request),
            scope=request.scope,
            category_id=request.category_id,
            agent_id=request.agent_id,
            status=request.status,
        )
        reply = rules_pb2.GetRulesResponse(
            rules=[rule_to_proto(v) for v in snapshot.rules],
            house_style_version=snapshot.house_style_version,
            category_rules_version=snapshot.category_rules_version,
            rule_high_water=snapshot.rule_high_water,
            composition_token=snapshot.composition_token,
        )
        if snapshot.composition_token_expires_at is not None:
            reply.composition_token_expires_at.CopyFrom(stamp(snapshot.composition_token_expires_at))
        return reply

    async def RetireRule(self, request: rules_pb2.RuleActionRequest, context: Context) -> rules_pb2.Rule:
        view = await app.retire_rule(
            self.env, _principal(request), request.lineage_id, request.expected_rev, request.idempotency_key
        )
        return rule_to_proto(view)

    async def PromoteRule(self, request: rules_pb2.RuleActionRequest, context: Context) -> rules_pb2.Rule:
        view = await app.promote_rule(
            self.env,
            _principal(request),
            request.lineage_id,
            request.expected_rev,
            request.idempotency_key,
            to_layer=request.to_layer,
        )
        return rule_to_proto(view)

    async def UndoRule(self, request: rules_pb2.RuleActionRequest, context: Context) -> rules_pb2.Rule:
        view = await app.undo_rule(
            self.env, _principal(request), request.lineage_id, request.expected_rev, request.idempotency_key
        )
        return rule_to_proto(view)

    async def ApproveRule(self, request: rules_pb2.RuleActionRequest, context: Context) -> rules_pb2.Rule:
        view = await app.approve_rule(self.env, _principal(request), request.lineage_id, request.expected_rev)
        return rule_to_proto(view)

    async def RejectRule(self, request: rules_pb2.RuleActionRequest, context: Context) -> rules_pb2.Rule:
        view = await app.reject_rule(self.env, _principal(request), request.lineage_id, request.expected_rev)
        return rule_to_proto(view)

    async def GetRuleHistory(
        self, request: rules_pb2.GetRuleHistoryRequest, context: Context
    ) -> rules_pb2.RuleHistory:
        views = await app.rule_history(self.env, _principal(request), request.lineage_id)
        return rules_pb2.RuleHistory(
            lineage_id=request.lineage_id, revisions=[rule_to_proto(v) for v in views]
        )

    async def GetRuleSettings(
        self, request: rules_pb2.GetRuleSettingsRequest, context: Context
    ) -> rules_pb2.RuleSettings:
        principal = _principal(request)
        on = await app.get_rule_settings(self.env, principal)
        return rules_pb2.RuleSettings(project_id=principal.project_id, write_approval=on)

    async def SetRuleSettings(
        self, request: rules_pb2.SetRuleSettingsRequest, context: Context
    ) -> rules_pb2.RuleSettings:
        principal = _principal(request)
        on = await app.set_rule_settings(self.env, principal, request.write_approval)
        return rules_pb2.RuleSettings(project_id=principal.project_id, write_approval=on)

    async def GetPacingSettings(
        self, request: rules_pb2.GetPacingSettingsRequest, context: Context
    ) -> rules_pb2.PacingSettings:
        principal = _principal(request)
        return _pacing(principal, await app.get_pacing_settings(self.env, principal))

    async def SetPacingSettings(
        self, request: rules_pb2.SetPacingSettingsRequest, context: Context
    ) -> rules_pb2.PacingSettings:
        principal = _principal(request)
        values = {f.name: v for f, v in request.values.ListFields()}
        settings = await app.set_pacing_settings(self.env, principal, values, list(request.clear))
        return _pacing(principal, settings)

    async def CreateCategory(
        self, request: rules_pb2.CreateCategoryRequest, context: Context
    ) -> rules_pb2.Category:
        view = await app.create_category(
            self.env,
            _principal(request),
            name=request.name,
            description=request.description,
            scope=request.scope,
            never_graduate=request.never_graduate,
            idempotency_key=request.idempotency_key,
        )
        return category_to_proto(view)

    async def MergeCategories(
        self, request: rules_pb2.MergeCategoriesRequest, context: Context
    ) -> rules_pb2.MergeCategoriesResponse:
        merge = await app.merge_categories(
            self.env,
            _principal(request),
            request.category_id,
            request.into_category_id,
            request.rationale,
            request.idempotency_key,
        )
        return rules_pb2.MergeCategoriesResponse(
            merged=category_to_proto(merge.merged),
            into=category_to_proto(merge.into),
            rules_moved=merge.rules_moved,
            rules_retired=merge.rules_retired,
            audit=merge_to_proto(merge.audit) if merge.audit is not None else None,
        )

    async def GetCategoryAudit(
        self, request: rules_pb2.GetCategoryAuditRequest, context: Context
    ) -> rules_pb2.CategoryAudit:
        merges = await app.category_audit(self.env, _principal(request), request.category_id)
        return rules_pb2.CategoryAudit(merges=[merge_to_proto(m) for m in merges])

    async def UpdateCategory(
        self, request: rules_pb2.UpdateCategoryRequest, context: Context
    ) -> rules_pb2.Category:
        view = await app.update_category(
            self.env,
            _principal(request),
            request.category_id,
            name=request.name if request.HasField("name") else None,
            description=request.description if request.HasField("description") else None,
            never_graduate=request.never_graduate if request.HasField("never_graduate") else None,
        )
        return category_to_proto(view)

    async def ListCategories(
        self, request: rules_pb2.ListCategoriesRequest, context: Context
    ) -> rules_pb2.ListCategoriesResponse:
        principal = _principal(request)
        (views, next_cursor), total = await asyncio.gather(
            app.list_categories(self.env, principal, cursor=request.cursor, limit=request.limit),
            app.count_categories(self.env, principal),
        )
        return rules_pb2.ListCategoriesResponse(
            categories=[category_to_proto(v) for v in views], next_cursor=next_cursor, total=total
        )

    async def GetGraduationStatus(
        self, request: rules_pb2.GetGraduationStatusRequest, context: Context
    ) -> rules_pb2.GraduationStatus:
        return status_to_proto(
            await app.graduation_status(self.env, _principal(request), request.category_id)
        )

    async def ProposeGraduation(
        self, request: rules_pb2.ProposeGraduationRequest, context: Context
    ) -> rules_pb2.GraduationProposal:
        proposal = await app.propose_graduation(
            self.env,
            _principal(request),
            request.category_id,
            request.to_state,
            request.note,
            request.evidence_json,
            request.idempotency_key,
        )
        return proposal_to_proto(proposal)

    async def ListGraduationProposals(
        self, request: rules_pb2.ListGraduationProposalsRequest, context: Context
    ) -> rules_pb2.ListGraduationProposalsResponse:
        proposals = await app.list_graduation_proposals(self.env, _principal(request), request.category_id)
        return rules_pb2.ListGraduationProposalsResponse(proposals=[proposal_to_proto(p) for p in proposals])

    async def RejectGraduationProposal(
        self, request: rules_pb2.RejectGraduationProposalRequest, context: Context
    ) -> rules_pb2.GraduationProposal:
        proposal = await app.reject_graduation_proposal(
            self.env, _principal(request), request.proposal_id, request.reason
        )
        return proposal_to_proto(proposal)

    async def Graduate(self, request: rules_pb2.GraduateRequest, context: Context) -> rules_pb2.Category:
        view = await app.graduate(self.env, _principal(request), request.category_id, request.to_state)
        return category_to_proto(view)

    async def SetRiskDial(
        self, request: rules_pb2.SetRiskDialRequest, context: Context
    ) -> rules_pb2.RiskDial:
        account: dict[str, Any] | None = None
        if request.HasField("account") or request.account_clear:
            account = _values_from_proto(request.account)
            account.update(dict.fromkeys(request.account_clear))
        categories = [
            (
                c.category_id,
                {**_values_from_proto(c.overrides), **dict.fromkeys(c.inherit_fields)},
            )
            for c in request.categories
        ]
        dial = await app.set_risk_dial(self.env, _principal(request), account=account, categories=categories)
        return dial_to_proto(dial)

    async def RotateCompositionKey(
        self, request: rules_pb2.RotateCompositionKeyRequest, context: Context
    ) -> rules_pb2.RotateCompositionKeyResponse:
        key_id = await app.rotate_composition_key(self.env, _principal(request))
        return rules_pb2.RotateCompositionKeyResponse(key_id=key_id)

    async def ResolveOwner(
        self, request: rules_pb2.ResolveOwnerRequest, context: Context
    ) -> rules_pb2.ResolveOwnerResponse:
        org_id, project_id = await app.resolve_owner(
            self.env, category_id=request.category_id, lineage_id=request.lineage_id
        )
        return rules_pb2.ResolveOwnerResponse(org_id=org_id, project_id=project_id)


def servicers(env: app.Env) -> Sequence[Registration]:
    return [
        (
            rules_pb2_grpc.add_RulesServiceServicer_to_server,
            RulesServicer(env),
            rules_pb2.DESCRIPTOR.services_by_name["RulesService"].full_name,
        )
    ]
