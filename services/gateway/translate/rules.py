"""The rules service's messages as the rule shapes (``Rule``, ``Category``, ``GraduationStatus``,
``RiskDial`` ...), and the console's dial values as protobuf."""

from __future__ import annotations

import orjson
from reviewloop.review.v1 import review_pb2
from reviewloop.rules.v1 import rules_pb2
from reviewloop.shapes import RISK_DIAL_FIELDS, DialValues

from gateway.translate import Json, page, present, timestamp


def as_rule(rule: rules_pb2.Rule) -> Json:
    """``Rule``; optional ids (project of a house-style rule, category of a general rule, source review,
    per-agent agent) are omitted when absent."""
    body: Json = {
        "id": rule.id,
        "lineage_id": rule.lineage_id,
        "rev": rule.rev,
        "rule_layer": rule.rule_layer,
        "org_id": rule.org_id,
    }
    if rule.project_id:
        body["project_id"] = rule.project_id
    body["scope"] = rule.scope
    if rule.category_id:
        body["category_id"] = rule.category_id
    body.update(kind=rule.kind, priority=rule.priority, rule_text=rule.rule_text)
    body.update(present(rule, "source_review_id", "source_turn_id"))
    body.update(author_kind=rule.author_kind, status=rule.status)
    if rule.agent_id:
        body["agent_id"] = rule.agent_id
        body["scope_agent_id"] = rule.agent_id  # the SDK's name
    if rule.supersedes_id:
        body["supersedes_id"] = rule.supersedes_id
    body.update(created_at=timestamp(rule.created_at), updated_at=timestamp(rule.updated_at))
    return body


def as_rule_revision(rule: rules_pb2.Rule) -> Json:
    """``RuleRevision``: the rule as it was, plus the audit facts of the change."""
    body = as_rule(rule)
    body.update(action=rule.action, changed_by_kind=rule.changed_by_kind, changed_by_id=rule.changed_by_id)
    if rule.high_water:
        body["rule_high_water"] = rule.high_water
    body["created_at"] = timestamp(rule.created_at)
    return body


# The SDK's audit action names for ours; approve and reject have none there. A promotion is a supersession
# (the catalog's word for it); a rule moved by a category merge is the SDK's ``merge``.
AUDIT_ACTIONS = {"created": "create", "revised": "supersede", "retired": "retire", "undone": "restore",
                 "approved": "approve", "rejected": "reject", "promoted": "supersede",
                 "merged": "merge"}  # fmt: skip
# The SDK's audit actor kinds (agent | human | system) for ours: the console is a human acting.
AUDIT_ACTORS = {"admin": "human", "review_agent": "agent", "service": "agent"}


def as_rule_audit(reply: rules_pb2.RuleHistory) -> Json:
    """``RuleAudit``: each revision of the lineage as the change that produced it."""
    revisions = [as_rule_revision(r) for r in reply.revisions]
    items: list[Json] = []
    for i, revision in enumerate(revisions):
        entry: Json = {
            "id": revision["id"],
            "entity_kind": "rule",
            "entity_id": reply.lineage_id,
            "action": AUDIT_ACTIONS.get(revision["action"], revision["action"]),
            "actor_kind": AUDIT_ACTORS.get(revision["changed_by_kind"], revision["changed_by_kind"]),
        }
        if revision["changed_by_id"]:
            entry["actor_id"] = revision["changed_by_id"]
        if i:
            entry["before_json"] = orjson.dumps(revisions[i - 1]).decode()
        later = revisions[i + 1] if i + 1 < len(revisions) else None
        entry.update(
            after_json=orjson.dumps(revision).decode(),
            undone=later is not None and later["action"] == "undone",
            created_at=revision["created_at"],
        )
        items.append(entry)
    return page(items)


def as_rule_list(reply: rules_pb2.GetRulesResponse) -> Json:
    """``RuleSnapshot`` (the SDK's ``RuleSnapshot``: ``items``, ``total``); the versions and the composition
    token come with an unfiltered read only."""
    body = page([as_rule(r) for r in reply.rules])
    if reply.composition_token:
        body.update(
            house_style_version=reply.house_style_version,
            category_rules_version=reply.category_rules_version,
            rule_high_water=reply.rule_high_water,
            composition_token=reply.composition_token,
            composition_token_expires_at=timestamp(reply.composition_token_expires_at),
        )
    return body


# The SDK's name for a category narrower than the org: ``agent_private``. Ours is the project's.
CATEGORY_SCOPES = {"project": "agent_private"}
CATEGORY_SCOPE_NAMES = {sdk: ours for ours, sdk in CATEGORY_SCOPES.items()}


def category_scope(scope: str) -> str:
    """A category scope as a request names it, as the rules service reads it."""
    return CATEGORY_SCOPE_NAMES.get(scope, scope)


def as_category(category: rules_pb2.Category) -> Json:
    body: Json = {
        "id": category.id,
        "name": category.name,
        "description": category.description,
        "scope": CATEGORY_SCOPES.get(category.scope, category.scope),
        "state": category.state,
        "author_kind": category.author_kind,
        "rule_high_water": category.rule_high_water,
        "rules_version": category.rules_version,
        "never_graduate": category.never_graduate,
        "clean_approval_count": category.clean_approval_count,
        "drift_count": category.drift_count,
    }
    body.update(created_at=timestamp(category.created_at), updated_at=timestamp(category.updated_at))
    body.update(present(category, "merged_into", "created_by_agent_id"))
    return body


def as_category_merge(reply: rules_pb2.MergeCategoriesResponse) -> Json:
    """``CategoryMerge``."""
    body: Json = {
        "merged": as_category(reply.merged),
        "into": as_category(reply.into),
        "rules_moved": reply.rules_moved,
        "rules_retired": reply.rules_retired,
    }
    if reply.HasField("audit"):
        body["audit"] = as_category_audit_entry(reply.audit)
    return body


def as_category_audit_entry(m: rules_pb2.CategoryMergeEntry) -> Json:
    """``CategoryAuditEntry``."""
    return {
        "id": m.id,
        "entity_kind": "category",
        "entity_id": m.category_id,
        "action": "merge",
        "actor_kind": m.actor_kind,
        "actor_id": m.actor_id,
        "merged_from": m.category_id,
        "merged_into": m.into_category_id,
        "rationale": m.rationale,
        "rules_moved": m.rules_moved,
        "rules_retired": m.rules_retired,
        "created_at": timestamp(m.created_at),
    }


def as_category_audit(reply: rules_pb2.CategoryAudit) -> Json:
    """``CategoryAudit``."""
    items = [as_category_audit_entry(m) for m in reply.merges]
    return {"items": items, "total": len(items)}


QUEUED_STATES = frozenset(
    {
        review_pb2.REVIEW_STATE_NEEDS_REVIEW,
        review_pb2.REVIEW_STATE_IN_REVIEW,
        review_pb2.REVIEW_STATE_CHATTING,
    }
)


def as_backlog_status(
    category: rules_pb2.Category, rules: rules_pb2.GetRulesResponse, pacing: review_pb2.PacingState
) -> Json:
    """``ScanBacklogStatus``: ``stale`` of the ``queued`` drafts predate the rule high-water in force."""
    queued = [d for d in pacing.drafts if d.state in QUEUED_STATES]
    stale = sum(d.rule_high_water < rules.rule_high_water for d in queued)
    return {
        "category_id": category.id,
        "state": category.state,
        "queued": len(queued),
        "current_enough": len(queued) - stale,
        "stale": stale,
        "current_category_rules_version": rules.category_rules_version,
        "current_house_style_version": rules.house_style_version,
        "staleness_tolerance": 0,
        "rule_high_water": rules.rule_high_water,
        "in_flight": sum(d.pacing == "in_flight" for d in pacing.drafts),
        "next_review_ids": list(pacing.next_review_ids),
    }


_PACING_ITEM = {"current": "in_window_fresh", "in_flight": "in_window_redrafting", "stale": "ahead"}


def _pacing_item(draft: review_pb2.PacedDraft, cursor: str) -> Json:
    """One queued draft against the review cursor and the window: a draft nudged for its redraft holds a
    slot of the window; else one queued before the draft a human last decided was passed over by the human
    (``behind_cursor``); else it is fresh, or stale and waiting its slot (``ahead``)."""
    state = _PACING_ITEM[draft.pacing]
    if draft.pacing != "in_flight" and cursor and draft.review_id < cursor:  # ids sort in queue order
        state = "behind_cursor"
    item: Json = {
        "review_id": draft.review_id,
        "state": state,
        "rule_high_water": draft.rule_high_water,
        "rule_snapshot_named": not draft.rule_snapshot_unnamed,
    }
    if draft.pacing != "current":
        item["required_high_water"] = draft.required_high_water
    return item


def pacing_values(values: rules_pb2.PacingValues) -> Json:
    return {
        "lookahead_window": values.lookahead_window,
        "rework_batch_max": values.rework_batch_max,
        "nudge_min_interval_ms": values.nudge_min_interval_ms,
    }


def as_pacing_state(settings: rules_pb2.PacingSettings, pacing: review_pb2.PacingState) -> Json:
    """``CategoryPacingState`` as the SDK types it: the review cursor (the draft a human last decided) and
    each queued draft's place against it and the window; ours beside it: ``pending`` counts the queued and
    the rejected drafts, ``stale`` those of them composed under older rules, ``released_count`` the stale drafts the window
    released (redrafted, restamped, closed)."""
    cursor = pacing.human_cursor_review_id
    items = [_pacing_item(d, cursor) for d in pacing.drafts if d.state in QUEUED_STATES]
    body: Json = {
        "category_id": pacing.category_id,
        "cursor_advanced_count": pacing.human_cursor_advanced_count,
        **pacing_values(settings.values),
        "queued": len(items),
        "in_window": sum(i["state"].startswith("in_window") for i in items),
        "redrafting": sum(i["state"] == "in_window_redrafting" for i in items),
        "items": items,
        "pending": len(pacing.drafts),
        "stale": sum(d.pacing != "current" for d in pacing.drafts),
        "rule_high_water": pacing.rule_high_water,
        "next_review_ids": list(pacing.next_review_ids),
        "released_count": pacing.cursor_advanced_count,
    }
    if cursor:
        body["cursor_review_id"] = cursor
    if pacing.HasField("last_nudged_at"):
        body["last_nudged_at"] = timestamp(pacing.last_nudged_at)
    return body


def as_pacing_settings(settings: rules_pb2.PacingSettings) -> Json:
    return {"project_id": settings.project_id, **pacing_values(settings.values)}


def as_graduation_status(status: rules_pb2.GraduationStatus) -> Json:
    body: Json = {"category_id": status.category_id, "state": status.state, "next_state": status.next_state}
    body.update(
        never_graduate=status.never_graduate,
        clean_approval_count=status.clean_approval_count,
        graduate_min_approvals=status.graduate_min_approvals,
        approvals_met=status.approvals_met,
        age_hours=status.age_hours,
        graduate_min_age_hours=status.graduate_min_age_hours,
        age_met=status.age_met,
        maturity_gate_met=status.maturity_gate_met,
        drift_count=status.drift_count,
        drift_demote_after=status.drift_demote_after,
        can_graduate=status.can_graduate,
    )
    return body


def as_graduation_proposal(proposal: rules_pb2.GraduationProposal) -> Json:
    return {
        "id": proposal.id,
        "category_id": proposal.category_id,
        "from_state": proposal.from_state,
        "to_state": proposal.to_state,
        "proposed_by": proposal.proposed_by,
        "note": proposal.note,
        "status": proposal.status,
        "created_at": timestamp(proposal.created_at),
        "graduation": as_graduation_status(proposal.graduation),
        "reason": proposal.reason or None,
        "decided_by": proposal.decided_by or None,
        "decided_at": timestamp(proposal.decided_at) if proposal.HasField("decided_at") else None,
        "evidence": orjson.loads(proposal.evidence_json) if proposal.evidence_json else None,
    }


def _risk_values(values: rules_pb2.RiskValues) -> Json:
    present = (name for name in RISK_DIAL_FIELDS if values.HasField(name))  # type: ignore[arg-type]
    return {name: getattr(values, name) for name in present}


def as_risk_dial(dial: rules_pb2.RiskDial) -> Json:
    categories = []
    for entry in dial.categories:
        written = _risk_values(entry.overrides)
        # Every override field, as the SDK's CategoryRiskDial types it: the value written, or null (inherit).
        item: Json = {"category_id": entry.category_id}
        item.update({name: written.get(name) for name in RISK_DIAL_FIELDS})
        item["effective"] = _risk_values(entry.effective)
        categories.append(item)
    return {"account": _risk_values(dial.account), "categories": categories}


def risk_values(values: DialValues) -> tuple[rules_pb2.RiskValues, list[str]]:
    """The dial fields a console request set, as (the values set, the fields explicitly null)."""
    given = {name: getattr(values, name) for name in values.model_fields_set if name in RISK_DIAL_FIELDS}
    message = rules_pb2.RiskValues(**{k: v for k, v in given.items() if v is not None})
    return message, sorted((k for k, v in given.items() if v is None), key=RISK_DIAL_FIELDS.index)


def _dial_outcome(outcome: review_pb2.DialOutcome) -> Json:
    dial = outcome.dial
    return {
        "dial": {
            "min_confidence": dial.min_confidence,
            "first_contact_gate": dial.first_contact_gate,
            "canary_rate": dial.canary_rate,
            "auto_send_cap_per_day": dial.auto_send_cap_per_day,
        },
        "auto_sent": outcome.auto_sent,
        "held": dict(sorted(outcome.held.items())),
    }


def as_dial_effect(effect: review_pb2.DialEffect) -> Json:
    return {
        "category_id": effect.category_id,
        "considered": effect.considered,
        "current": _dial_outcome(effect.current),
        "proposed": _dial_outcome(effect.proposed),
        "decided": effect.decided,
        "clean_streak": effect.clean_streak,
        "edit_rate": effect.edit_rate,
    }
