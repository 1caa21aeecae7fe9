"""The SDK's exported types as JSON Schemas: the reference where spec 000 is silent (spec/SDK.md).

Written from the SDK's ``models.ts`` and ``problem.ts`` (contract 0.1.8): the same type names, field names,
optionality and enums. A TypeScript type ignores fields it does not declare, but "ignore" would let a renamed
optional field pass unseen, so each schema is closed: a field is either the SDK's or one of the extras the
spec names (or the project adds) and lists here beside it. A renamed field is then either a missing required
field or an unknown one.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

STRING: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
NUMBER: dict[str, Any] = {"type": "number"}
BOOL: dict[str, Any] = {"type": "boolean"}
STAMP: dict[str, Any] = {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$"}
OBJECT: dict[str, Any] = {"type": "object"}
STRINGS: dict[str, Any] = {"type": "array", "items": STRING}
ANY: dict[str, Any] = {}


def enum(*values: str) -> dict[str, Any]:
    return {"enum": list(values)}


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def shape(
    required: dict[str, Any], optional: dict[str, Any] | None = None, extras: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A closed object: the SDK's required and optional fields, and the extras our wire adds."""
    return {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **(optional or {}), **(extras or {})},
        "additionalProperties": False,
    }


REVIEW_STATE = enum(
    "needs_review", "in_review", "chatting", "stale", "approved", "sent", "auto_sent", "rejected", "stalled",
    "cancelled", "failed",
)  # fmt: skip
REVIEW_MODE = enum("review", "direct")
ACTOR_KIND = enum("agent", "human", "review_agent", "system")
NULLABLE_NUMBER: dict[str, Any] = {"type": ["number", "null"]}
# The SDK's AccountRiskDial and EffectiveRiskDial (the same seven values), and the review settings we add.
RISK_VALUES: dict[str, Any] = {
    "min_confidence": NUMBER,
    "first_contact_gate": BOOL,
    "drift_demote_after": INT,
    "canary_rate": NUMBER,
    "graduate_min_approvals": INT,
    "graduate_min_age_hours": NUMBER,
    "auto_send_cap_per_day": INT,
}
RISK_EXTRAS: dict[str, Any] = {
    "quorum_approvals": INT,
    "quorum_review_agent": BOOL,
    "review_deadline_minutes": INT,
    "quorum_panel": INT,
}
CATEGORY_STATE = enum("supervised", "auto_notify", "auto_silent")

SDK: dict[str, dict[str, Any]] = {
    "Review": shape(
        {
            "id": STRING,
            "state": REVIEW_STATE,
            "mode": REVIEW_MODE,
            "effective_mode": REVIEW_MODE,
            "kind": enum("send", "reply", "forward"),
            "from_address": STRING,
            "agent_id": STRING,
            "intent_summary": STRING,
            "revision": INT,
            "version": INT,
            "proposed_subject": STRING,
            "proposed_body_text": STRING,
            "proposed_to": STRINGS,
            "created_at": STAMP,
            "updated_at": STAMP,
        },
        {
            "category_id": STRING,
            "intent_meta": OBJECT,
            "proposed_body_html": STRING,
            "proposed_cc": STRINGS,
            "proposed_bcc": STRINGS,
            "sent_subject": STRING,
            "sent_body_text": STRING,
            "diff_unified": STRING,
            "sent_message_id": STRING,
            "gate_outcome": STRING,
            "stale_reason": STRING,
            "decision_feedback": STRING,
            "closed": BOOL,
            "send_error": STRING,
            "send_path": STRING,
            "decided_at": STAMP,
            "sent_at": STAMP,
            "recheck_completed_through_seq": INT,
        },
        # The spec's and the project's names beside the SDK's.
        {
            "org_id": STRING,
            "project_id": STRING,
            "to": STRINGS,
            "cc": STRINGS,
            "bcc": STRINGS,
            "subject": STRING,
            "body_text": STRING,
            "body_html": STRING,
            "intent": ANY,
            "message_id": STRING,
            "thread_ref": STRING,
            "reply_to": STRING,
            "parent_message_id": STRING,
            "confidence": NUMBER,
            "headers": OBJECT,
            "message_sha256": STRING,  # get_review's approval digest (issue 38)
            "attachments": array(OBJECT),
            "turns": array(ref("ReviewTurn")),
            "turn": ref("ReviewTurn"),  # post_review_chat answers the review and the turn it added
            # Ours: the rules the draft is checked against, and whether its agent named them (issue 34).
            "rule_high_water": INT,
            "rule_snapshot_named": BOOL,
            # Ours: a released review's delivery attempt.
            "delivery": shape(
                {"status": STRING, "tries": INT, "started_at": STAMP, "age_s": NUMBER},
                extras={"parked_at": STAMP, "error": STRING, "resolution": STRING},
            ),
        },
    ),
    "ReviewTurn": shape(
        {"id": STRING, "seq": INT, "turn_type": STRING, "actor_kind": ACTOR_KIND, "created_at": STAMP},
        {"actor_id": STRING, "body": STRING, "revision": INT, "diff_json": OBJECT, "metadata": OBJECT},
        {"action": STRING},
    ),
    "ReviewDecisionContext": shape(
        {
            "review": ref("Review"),
            "turns": array(ref("ReviewTurn")),
            "hop_count": INT,
            # Null where nothing records them yet: no review-agent round admitted, no deadline on the draft.
            "max_hops": {"type": ["integer", "null"]},
            "review_deadline": {"anyOf": [STAMP, {"type": "null"}]},
            "deadline_passed": BOOL,
            "hops_exhausted": BOOL,
            "force_to_human": BOOL,
        },
        {"force_reason": STRING},
        {"review_id": STRING},
    ),
    "QueuedForReviewResult": shape(
        {"kind": enum("queued_for_review"), "review": ref("Review")},
        extras={
            "status": STRING,
            "review_id": STRING,
            "state": REVIEW_STATE,
            "thread_ref": STRING,  # a queued reply names its thread
            "gate_outcome": STRING,
            "send_error": STRING,
        },
    ),
    "SentResult": shape(
        {"kind": enum("sent"), "message": shape({"id": STRING}, {"thread_id": STRING})},
        {"review": ref("Review")},
        {
            "status": STRING,
            "review_id": STRING,
            "state": REVIEW_STATE,
            "message_id": STRING,
            "thread_ref": STRING,
            "gate_outcome": STRING,
        },
    ),
    "SubmitForReviewResult": {"oneOf": [ref("QueuedForReviewResult"), ref("SentResult")]},
    "ReviewFeedbackComment": shape(
        {"turn_id": STRING, "actor_kind": ACTOR_KIND, "body": STRING, "created_at": STAMP},
        {"actor_id": STRING},
    ),
    "ReviewFeedback": shape(
        {
            "review_id": STRING,
            "decision": STRING,
            "comments": array(ref("ReviewFeedbackComment")),
            "new_rules": STRINGS,
        },
        {"diff_unified": STRING, "diff_json": OBJECT},
        {"approvers": STRINGS},  # issue 19: whose approval stands on the released revision
    ),
    "ReviewEvent": shape(
        {"seq": INT, "id": STRING, "reason": STRING, "created_at": STAMP},
        {"review_id": STRING, "category_id": STRING, "payload": OBJECT},
    ),
    "ReviewEventCursor": shape({"review_id": STRING, "last_acked_seq": INT}),
    "ReviewEventsResult": shape(
        {"events": array(ref("ReviewEvent"))},
        {"cursors": array(ref("ReviewEventCursor"))},
        {"next_cursor": {"type": ["string", "null"]}},
    ),
    "AckReviewEventResult": shape({}, {"cursors": array(ref("ReviewEventCursor"))}, {"acked": INT}),
    "ReviewerDecisionResult": shape(
        {
            "kind": enum("sent", "sent_to_human"),
            "review": ref("Review"),
            "sent": BOOL,
            "sent_to_human": BOOL,
        },
        {"message_id": STRING, "thread_id": STRING, "forced_by_breaker": STRING},
        # Ours: how far a release's delivery got (``sent`` is true once it is delivered).
        {"delivery_status": enum("delivered", "queued", "failed")},
    ),
    "AccountRiskDial": shape(RISK_VALUES, extras=RISK_EXTRAS),
    "EffectiveRiskDial": shape(RISK_VALUES, extras=RISK_EXTRAS),
    "CategoryRiskDial": shape(
        {
            "category_id": STRING,
            "min_confidence": NULLABLE_NUMBER,
            "first_contact_gate": {"type": ["boolean", "null"]},
            "drift_demote_after": NULLABLE_NUMBER,
            "canary_rate": NULLABLE_NUMBER,
            "graduate_min_approvals": NULLABLE_NUMBER,
            "graduate_min_age_hours": NULLABLE_NUMBER,
            "effective": ref("EffectiveRiskDial"),
        },
        # Ours: the overrides of the values the account's dial adds (a value or null as well).
        extras={
            "auto_send_cap_per_day": NULLABLE_NUMBER,
            "quorum_approvals": NULLABLE_NUMBER,
            "quorum_review_agent": {"type": ["boolean", "null"]},
            "review_deadline_minutes": NULLABLE_NUMBER,
            "quorum_panel": NULLABLE_NUMBER,
        },
    ),
    "RiskDial": shape({"account": ref("AccountRiskDial"), "categories": array(ref("CategoryRiskDial"))}),
    "Category": shape(
        {
            "id": STRING,
            "name": STRING,
            "description": STRING,
            "scope": enum("org_shared", "agent_private"),
            "state": CATEGORY_STATE,
            "author_kind": enum("agent", "human"),
            "rule_high_water": INT,
            "rules_version": INT,
            "created_at": STAMP,
            "updated_at": STAMP,
        },
        {"merged_into": STRING, "created_by_agent_id": STRING},
        {
            "never_graduate": BOOL,
            "clean_approval_count": INT,
            "drift_count": INT,
            "org_id": STRING,
            "project_id": STRING,
        },
    ),
    "Rule": shape(
        {
            "id": STRING,
            "lineage_id": STRING,
            "rev": INT,
            "scope": enum("general", "category"),
            "rule_text": STRING,
            "kind": enum("soft", "hard"),
            "priority": INT,
            "status": enum("proposed", "active", "superseded", "retired"),
            "author_kind": enum("agent", "human"),
            "created_at": STAMP,
            "updated_at": STAMP,
        },
        {
            "rule_layer": enum("org", "project"),
            "org_id": STRING,
            "project_id": STRING,
            "category_id": STRING,
            "scope_agent_id": STRING,
            "supersedes_id": STRING,
        },
        {"source_review_id": STRING, "agent_id": STRING},
    ),
    "RuleSnapshot": shape(
        {
            "items": array(ref("Rule")),
            "total": INT,
            "house_style_version": INT,
            "category_rules_version": INT,
            "rule_high_water": INT,
        },
        {"next_cursor": STRING, "composition_token": STRING, "composition_token_expires_at": STAMP},
    ),
    "GraduationStatus": shape(
        {
            "category_id": STRING,
            "state": CATEGORY_STATE,
            "next_state": STRING,
            "never_graduate": BOOL,
            "clean_approval_count": INT,
            "graduate_min_approvals": INT,
            "approvals_met": BOOL,
            "age_hours": NUMBER,
            "graduate_min_age_hours": NUMBER,
            "age_met": BOOL,
            "maturity_gate_met": BOOL,
            "drift_count": INT,
            "drift_demote_after": INT,
            "can_graduate": BOOL,
        }
    ),
    "ScanBacklogStatus": shape(
        {
            "category_id": STRING,
            "state": enum("supervised", "auto_notify", "auto_silent", "probation"),
            "queued": INT,
            "current_enough": INT,
            "stale": INT,
            "current_category_rules_version": INT,
            "current_house_style_version": INT,
            "staleness_tolerance": INT,
        },
        extras={"rule_high_water": INT, "in_flight": INT, "next_review_ids": STRINGS},
    ),
    "PacingItem": shape(
        {
            "review_id": STRING,
            "state": enum("behind_cursor", "in_window_fresh", "in_window_redrafting", "ahead"),
        },
        extras={"rule_high_water": INT, "required_high_water": INT, "rule_snapshot_named": BOOL},
    ),
    "CategoryPacingState": shape(
        {
            "category_id": STRING,
            "cursor_advanced_count": INT,
            "lookahead_window": INT,
            "rework_batch_max": INT,
            "nudge_min_interval_ms": INT,
            "queued": INT,
            "in_window": INT,
            "redrafting": INT,
            "items": array(ref("PacingItem")),
        },
        {"cursor_review_id": STRING},
        extras={
            "stale": INT,
            "rule_high_water": INT,
            "next_review_ids": STRINGS,
            "last_nudged_at": STAMP,
            "released_count": INT,
            "pending": INT,
        },
    ),
    "RuleAuditEntry": shape(
        {
            "id": STRING,
            "entity_kind": enum("rule", "category"),
            "entity_id": STRING,
            "action": enum("create", "supersede", "retire", "rename", "redescribe", "merge", "restore"),
            "actor_kind": enum("agent", "human", "system"),
            "undone": BOOL,
            "created_at": STAMP,
        },
        {"actor_id": STRING, "before_json": STRING, "after_json": STRING},
    ),
    "ProblemField": shape({}, {"field": STRING, "code": STRING, "detail": STRING}),
    "Problem": shape(
        {"type": STRING, "title": STRING, "status": INT, "code": STRING},
        {
            "reason": STRING,
            "next_action": STRING,
            "projects": OBJECT,
            # A free-form record in the SDK; ours holds the review's recovery facts, closed so a rename fails.
            "current_state": shape(
                {},
                {
                    "state": STRING,
                    "revision": INT,
                    "version": INT,
                    "allowed_actions": STRINGS,
                    "sent_message_id": STRING,
                    # a reply's thread as it now is (reply_context_changed)
                    "thread_id": STRING,
                    "context_version": STRING,
                    "last_message_id": STRING,
                },
            ),
            "unsent_text": STRING,
            "detail": STRING,
            "request_id": STRING,
            "errors": array(ref("ProblemField")),
        },
    ),
}


def page(item: str) -> dict[str, Any]:
    """The SDK's ``Page<T>`` (``next_cursor`` absent on the last page)."""
    return shape({"items": array(ref(item)), "total": INT}, {"next_cursor": STRING})


SDK["Page<Review>"] = page("Review")
SDK["Page<Category>"] = page("Category")
SDK["Page<ReviewTurn>"] = page("ReviewTurn")
SDK["Page<RuleAuditEntry>"] = page("RuleAuditEntry")


def sdk_errors(type_name: str, value: Any) -> list[str]:
    """Why ``value`` is not a valid ``type_name`` of the SDK (empty: it is)."""
    validator = Draft202012Validator({"$defs": SDK, "$ref": f"#/$defs/{type_name}"})
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]
