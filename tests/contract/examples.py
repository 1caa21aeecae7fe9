"""The canonical example JSON of spec 000, verbatim (``…`` elisions kept as strings; the feedback
example's elided hunk list filled with the diff_json example's hunk). Keyed by the shape it shows."""

from __future__ import annotations

from typing import Any

INTENT = {
    "summary": "Re-engage cold lead at Acme about Q3 pilot",
    "meta": {"goal": "book_meeting", "recipient": "vp@acme.com", "prior_touches": 2, "urgency": "normal"},
}

HUNK = {
    "field": "body_text",
    "op": "replace",
    "before": "Let me know your thoughts.",
    "after": "Can you do Thursday 2pm?",
}

DIFF_JSON = {"fields_changed": ["subject", "body_text"], "hunks": [HUNK]}

FEEDBACK = {
    "review_id": "rr_…",
    "decision": "edited",
    "diff_unified": "@@ -1,3 +1,3 @@ …",
    "diff_json": {"fields_changed": ["body_text"], "hunks": [HUNK]},
    "comments": [{"turn_id": "turn_…", "actor_kind": "human", "body": "be more pushy, we need MRR"}],
    "new_rules": ["rule_…"],
}

RULE = {
    "id": "rule_…",
    "lineage_id": "rln_…",
    "rev": 3,
    "rule_layer": "project",
    "org_id": "org_…",
    "project_id": "prj_…",
    "scope": "category",
    "category_id": "cat_…",
    "kind": "soft",
    "priority": 0,
    "rule_text": "Always propose a concrete time, never 'let me know'.",
    "source_review_id": "rr_…",
    "author_kind": "human",
    "status": "active",
}

NUDGES = {
    "propagate_general_rule": {
        "seq": 4127,
        "id": "ndg_…",
        "reason": "propagate_general_rule",
        "review_id": "rr_…",
        "category_id": "cat_…",
        "payload": {
            "rule": {"id": "rule_…", "rule_text": "…"},
            "siblings": {"category_id": "cat_…", "pending_count": 499},
            "suggested_batch": 3,
        },
    },
    "sent": {
        "seq": 12,
        "id": "ndg_…",
        "reason": "sent",
        "review_id": "rr_…",
        "payload": {
            "state": "sent",
            "message_id": "msg_…",
            "send_path": "human_reviewed",
            "decision": "edited",
            "sent_at": "2026-08-31T09:14:02Z",
            "thread_ref": "thread_…",
        },
    },
    "sent_graduated": {
        "seq": 3,
        "id": "ndg_…",
        "reason": "sent",
        "review_id": "rr_…",
        "payload": {
            "state": "auto_sent",
            "message_id": "msg_…",
            "send_path": "graduated_auto",
            "gate_outcome": "",
            "sent_at": "2026-08-31T09:14:02Z",
        },
    },
    "send_failed": {
        "seq": 9,
        "id": "ndg_…",
        "reason": "send_failed",
        "review_id": "rr_…",
        "payload": {
            "state": "failed",
            "error": "<vendor-scrubbed reason>",
            "from_state": "approved",
            "agent_retryable": False,
            "next_action": "compose_and_submit_a_new_message",
        },
    },
    "front_run_next": {
        "seq": 14,
        "id": "ndg_…",
        "reason": "front_run_next",
        "review_id": "rr_…",
        "payload": {
            "state": "sent",
            "sent_message_id": "msg_…",
            "your_parent_revision": 3,
            "current_revision": 5,
            "diff_available": True,
        },
    },
}

CHAT = {"text": "Do you want me to lead with the pilot ROI, or the case study?"}

CATEGORY = {
    "id": "cat_…",
    "name": "Sales Outreach",
    "description": "cold outbound to prospects about the pilot",
    "scope": "org_shared",
    "state": "supervised",
    "author_kind": "agent",
    "rule_high_water": 12,
    "rules_version": 7,
    "never_graduate": False,
    "clean_approval_count": 18,
    "drift_count": 1,
}

GRADUATION = {
    "category_id": "cat_…",
    "state": "supervised",
    "next_state": "auto_notify",
    "never_graduate": False,
    "clean_approval_count": 18,
    "graduate_min_approvals": 20,
    "approvals_met": False,
    "age_hours": 73.5,
    "graduate_min_age_hours": 48,
    "age_met": True,
    "maturity_gate_met": False,
    "drift_count": 1,
    "drift_demote_after": 3,
    "can_graduate": False,
}

_EFFECTIVE = {
    "min_confidence": 0.85,
    "first_contact_gate": True,
    "drift_demote_after": 3,
    "canary_rate": 0.1,
    "graduate_min_approvals": 20,
    "graduate_min_age_hours": 48,
    "auto_send_cap_per_day": 200,
    "quorum_approvals": 1,
    "quorum_review_agent": False,
    "review_deadline_minutes": 0,
    "quorum_panel": 0,
}

RISK_DIAL = {
    "account": {**_EFFECTIVE, "min_confidence": 0.7},
    "categories": [
        {"category_id": "cat_…", "min_confidence": 0.85, "first_contact_gate": None, "effective": _EFFECTIVE}
    ],
}

DECISION_REQUEST = {
    "action": "edit",
    "revision": 4,
    "version": 9,
    "subject": "Q3 pilot: quick question",
    "body": "Can you do Thursday 2pm? Pilot ROI attached.",
    "feedback": "tightened the CTA",
}

DECISION_RESULT = {
    "kind": "sent",
    "sent": True,
    "sent_to_human": False,
    "message_id": "msg_…",
    "thread_id": "thread_…",
    "review": {"id": "rr_…", "state": "sent", "revision": 5},
}

# A 409 stale problem as the 409 taxonomy and its recovery facts describe it.
PROBLEM = {
    "type": "https://reviewloop.dev/problems/stale",
    "title": "The revision you named is no longer current",
    "status": 409,
    "detail": "Revision 3 is no longer current (it is 4): re-read the review, re-apply, resubmit.",
    "code": "stale",
    "errors": [
        {"field": "state", "code": "in_review", "detail": "in_review"},
        {"field": "revision", "code": "4", "detail": "4"},
        {"field": "version", "code": "7", "detail": "7"},
        {"field": "allowed_action", "code": "get_review", "detail": "get_review"},
    ],
    # The SDK's extras: the same facts as one object, and what to do next.
    "next_action": "reread_and_retry",
    "current_state": {"state": "in_review", "revision": 4, "version": 7, "allowed_actions": ["get_review"]},
}

# (shape, example id, example): every canonical example of spec 000, by the shape it shows.
CANONICAL: list[tuple[str, str, dict[str, Any]]] = [
    ("ReviewIntent", "intent", INTENT),
    ("ReviewFeedback", "feedback", FEEDBACK),
    ("DiffJson", "diff_json", DIFF_JSON),
    ("DiffHunk", "hunk", HUNK),
    ("Rule", "rule", RULE),
    *[("ReviewEvent", f"nudge_{name}", nudge) for name, nudge in NUDGES.items()],
    ("PostReviewChatRequest", "chat", CHAT),
    ("Category", "category", CATEGORY),
    ("GraduationStatus", "graduation", GRADUATION),
    ("RiskDial", "risk_dial", RISK_DIAL),
    ("ReviewerDecisionRequest", "decision_request", DECISION_REQUEST),
    ("ReviewerDecisionResult", "decision_result", DECISION_RESULT),
    ("Problem", "problem_stale", PROBLEM),
]
