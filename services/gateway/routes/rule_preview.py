"""``preview_rule_from_edit`` (issue 38): before a rule is saved from an edit, the rule text the edit's
changed words suggest (diff's word diff, rules' proposal), the live rules it may conflict with (rules'
check) and the pending drafts of its reach it would hold (review_state's listing of the drafts a rule
change marks stale: pending, in its scope). One command: the REST route, its MCP tool and the console's
save-as-rule panel all run ``preview_rule``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header
from reviewloop.diff.v1 import diff_pb2
from reviewloop.review.v1 import review_pb2
from reviewloop.rules.v1 import rules_pb2
from reviewloop.shapes import RulePreview, RulePreviewIn
from reviewloop.tenancy import Principal

from gateway.auth import ANY_PROJECT_KEY
from gateway.backends import Backends, backends
from gateway.commands import reviews
from gateway.commands.reviews import STATES
from gateway.responses import ShapedRoute
from gateway.translate import Json
from gateway.translate.reviews import as_review
from gateway.translate.rules import as_rule

router = APIRouter(tags=["rules"], route_class=ShapedRoute)

# The drafts a rule change marks stale (review_state's pending_in_scope): held until their agent
# re-applies the rules.
HELD_STATES = ("needs_review", "in_review", "chatting", "rejected")
HELD_LISTED = 200


def _rule_place(scope: str, review: Json) -> dict[str, str]:
    """Where a save-as-rule of ``scope`` sits on the ladder, as a decision's new rule puts it."""
    if scope == "house":
        return {"scope": "general", "rule_layer": "org"}
    if scope == "category":
        return {"scope": "category", "category_id": review.get("category_id") or ""}
    if scope == "agent":
        return {"scope": "general", "agent_id": review.get("agent_id") or ""}
    return {"scope": "general"}


async def preview_rule(backend: Backends, principal: Principal, review_id: str, body: RulePreviewIn) -> Json:
    """The command: nothing is written."""
    proto = principal.to_proto()
    review = as_review(await reviews.get_review(backend, principal, review_id))
    place = _rule_place(body.scope, review)
    edited = {"subject": review["subject"] if body.subject is None else body.subject, "body_text": body.body}
    diffs = await asyncio.gather(
        *(
            backend.diff.DiffWords(
                diff_pb2.DiffWordsRequest(principal=proto, before=review[name], after=edited[name]),
                timeout=backend.timeout_s,
            )
            for name in edited
        )
    )
    changes = [
        {"field": name, "op": s.op, "before": s.before, "after": s.after}
        for name, diff in zip(edited, diffs, strict=True)
        for s in diff.segments
        if s.op != "equal"
    ]
    checked, listed = await asyncio.gather(
        backend.rules.PreviewRule(
            rules_pb2.PreviewRuleRequest(
                principal=proto,
                rule_text=body.rule_text,
                changes=[
                    rules_pb2.EditChange(op=c["op"], before=c["before"], after=c["after"]) for c in changes
                ],
                **place,
            ),
            timeout=backend.timeout_s,
        ),
        backend.review.ListReviews(
            review_pb2.ListReviewsRequest(
                principal=proto,
                states=[STATES[s] for s in HELD_STATES],
                category_id=place.get("category_id", ""),
                agent_id=place.get("agent_id", ""),
                limit=HELD_LISTED,
            ),
            timeout=backend.timeout_s,
        ),
    )
    held = [as_review(r) for r in reversed(listed.reviews) if r.id != review_id]
    return {
        "review_id": review_id,
        "scope": body.scope,
        "changes": changes,
        "proposed_text": checked.proposed_text,
        "rule_text": checked.rule_text,
        "conflicts": [{"kind": c.kind, "rule": as_rule(c.rule)} for c in checked.conflicts],
        "held_count": len(held),
        "held": [_reached(r) for r in held],
    }


def _reached(review: Json) -> dict[str, Any]:
    intent = review.get("intent") or {}
    return {
        "review_id": review["id"],
        "summary": str(intent.get("summary") or review["subject"] or review["id"]),
        "state": review["state"],
        "agent_id": review.get("agent_id") or "",
        "category_id": review.get("category_id") or "",
    }


@router.post(
    "/v1/reviews/{review_id}/rule-preview",
    operation_id="preview_rule_from_edit",
    response_model=RulePreview,
)
async def preview_rule_from_edit(
    review_id: str,
    body: RulePreviewIn,
    principal: Annotated[Principal, Depends(ANY_PROJECT_KEY)],
    backend: Annotated[Backends, Depends(backends)],
    idempotency_key: Annotated[str, Header(alias="Idempotency-Key", max_length=255)] = "",
) -> Json:
    """A rule from an edit, before it is saved: its text, the rules it may conflict with, the drafts it holds."""
    return await preview_rule(backend, principal, review_id, body)
