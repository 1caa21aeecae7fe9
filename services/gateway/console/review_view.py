"""What the review page shows of a review: its delivered headers and attachments, the send's state, the
turns with their diffs, any two revisions compared, the save-as-rule scopes with their reach, the
escalation and the hold. Pure: each turns what the services answered into what the template shows."""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
from datetime import UTC
from typing import Any

from fastapi import Request
from reviewloop.review.v1 import review_pb2

from gateway.console import escalation, web
from gateway.console.queue_view import PENDING
from gateway.console.sessions import Session
from gateway.console.warnings import hidden_html, unnamed_rule_snapshot, warnings

Lines = list[tuple[str, str]]  # a diff's lines, each (css class, text): "diff-del", "diff-add" or ""
_MARKS = {"- ": "diff-del", "+ ": "diff-add"}
OUTCOMES = {"delivered": "Mark delivered", "failed": "Mark failed"}
REACHED = [*PENDING, "rejected"]  # the drafts a rule saved now reaches


def shown(review: dict[str, Any], who: web.Actors) -> dict[str, Any]:
    """The review's own facts as the review page's template names them."""
    intent = review.get("intent") or {}
    return {
        "body_html": review.get("body_html") or "",
        "escalation": _escalation(review, who),
        "warnings": warnings(review),
        "snapshot_notes": unnamed_rule_snapshot(review),
        "form_state": _form_state(review),
        "delivery": _delivery(review),
        "outcomes": OUTCOMES,
        "headers": _headers(review),
        "hidden": hidden_html(review["body_html"]) if review.get("body_html") else [],
        "attachments": _attachments(review),
        "intent_summary": intent.get("summary") or "",
        "intent_meta": json.dumps(intent.get("meta") or {}, indent=2, ensure_ascii=False),
        "turns": _turns(review, who),
    }


def _diff(hunks: list[dict[str, Any]]) -> Lines:
    """A per-field diff marked with - and + in text (never colour alone)."""
    out = []
    for hunk in hunks:
        out.append(f"@@ {hunk['field']} ({hunk['op']})")
        for sign, value in (("-", hunk.get("before")), ("+", hunk.get("after"))):
            if value in (None, "", []):
                continue
            text = "\n".join(value) if isinstance(value, list) else str(value)
            out += [f"{sign} {line}" for line in text.splitlines() or [""]]
    return [(_MARKS.get(line[:2], ""), line) for line in "\n".join(out).splitlines()]


def _headers(review: dict[str, Any]) -> list[tuple[str, str]]:
    """The delivered headers, each value as Python writes it (control characters spelled out)."""
    rows = [
        ("From", review.get("from_address") or "(the project's sender)"),
        ("To", ", ".join(review["to"])),
        ("Cc", ", ".join(review["cc"])),
        ("Bcc", ", ".join(review["bcc"])),
        ("Reply-To", review.get("reply_to") or ""),
        ("Subject", review["subject"]),
        *sorted((review.get("headers") or {}).items()),
    ]
    return [(k, repr(v)[1:-1]) for k, v in rows if v]


def _attachments(review: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            **item,
            "sha256": hashlib.sha256(base64.b64decode(item.get("content_base64") or "")).hexdigest(),
        }
        for item in review.get("attachments") or []
    ]


def _delivery(review: dict[str, Any]) -> dict[str, Any] | None:
    """Where the send stands (status, tries, when it parked and for how long, the last error, who closed
    it by hand); an admin may close a parked send by evidence the platform cannot see, with a reason."""
    delivery = review.get("delivery")
    if not delivery:
        return None
    return {
        "status": delivery["status"],
        "tries": delivery["tries"],
        "started_at": delivery.get("started_at") or "",
        "parked_at": delivery.get("parked_at") or "",
        "age": _duration(delivery.get("age_s") or 0.0),
        "error": delivery.get("error") or "",
        "resolution": delivery.get("resolution") or "",
    }


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def _turns(review: dict[str, Any], who: web.Actors) -> list[dict[str, Any]]:
    return [
        {
            "what": turn["turn_type"] + (f" ({turn['action']})" if turn.get("action") else ""),
            "by": who.name(turn.get("actor_id", ""), turn["actor_kind"]),
            "revision": turn["revision"],
            "created_at": turn["created_at"],
            "body": turn["body"],
            "diff": _diff(turn["diff_json"]["hunks"]) if turn.get("diff_json") else [],
        }
        for turn in review.get("turns") or []
    ]


def compare(before: dict[str, str], after: dict[str, str]) -> dict[str, Any]:
    """A per-field diff of two revisions, each changed line marked - or + in text (never colour alone),
    and the names of the fields that did not change."""
    lines: Lines = []
    same = []
    for name in before:
        if before[name] == after[name]:
            same.append(name)
            continue
        lines.append(("", f"@@ {name}"))
        for line in difflib.ndiff(before[name].splitlines(), after[name].splitlines()):
            if not line.startswith("? "):  # ndiff's intraline hints: the -/+ lines already say it
                lines.append((_MARKS.get(line[:2], ""), line))
    return {"lines": lines, "same": same}


def _pick(request: Request, name: str, default: int, known: list[int]) -> int:
    raw = request.query_params.get(name, "")
    return int(raw) if raw.isdigit() and int(raw) in known else default


def history(request: Request, revisions: dict[int, dict[str, str]]) -> dict[str, Any] | None:
    """Any two kept revisions side by side (default: the previous one against the current one)."""
    known = sorted(revisions)
    if len(known) < 2:
        return None
    a = _pick(request, "rev_a", known[-2], known)
    b = _pick(request, "rev_b", known[-1], known)
    return {"known": known, "a": a, "b": b, "compare": compare(revisions[a], revisions[b])}


def neighbours(review_id: str, reached: list[dict[str, Any]]) -> tuple[str, str]:
    """The pending drafts before and after this one, oldest first ("" at either end); ``reached`` is the
    listing of ``REACHED``, newest first."""
    ids = [r["id"] for r in reversed(reached) if r["state"] in PENDING]
    at = ids.index(review_id) if review_id in ids else None
    previous = ids[at - 1] if at else ""
    following = ids[at + 1] if at is not None and at + 1 < len(ids) else ""
    return previous, following


def _reach(review: dict[str, Any], pending: list[dict[str, Any]]) -> dict[str, int]:
    """How many of the project's pending drafts (``REACHED``) a rule saved in each scope will reach (house
    style reaches these and every other project's of the org)."""
    category, agent = review.get("category_id"), review.get("agent_id")
    return {
        "house": len(pending),
        "general": len(pending),
        "category": sum(1 for r in pending if category and r.get("category_id") == category),
        "agent": sum(1 for r in pending if agent and r.get("agent_id") == agent),
    }


def rule_scopes(
    review: dict[str, Any], session: Session, category_name: str, reached: list[dict[str, Any]]
) -> list[dict[str, str]]:
    """The save-as-rule scope choice: house style (the org's; an admin's only, shown to a reviewer as
    unavailable rather than hidden), this project, this category, this agent."""
    reach = _reach(review, reached)
    choices = [
        {
            "value": "house",
            "label": f"house style: every project of the org (reaches {reach['house']} pending drafts here)",
            "unavailable": ""
            if session.is_admin
            else "only an admin sets house style; save it for this project instead",
        },
        {
            "value": "general",
            "label": f"general: every draft of this project (reaches {reach['general']} pending drafts)",
            "unavailable": "",
        },
    ]
    if review.get("category_id"):
        label = f"category {category_name} (reaches {reach['category']} pending drafts)"
        choices.append({"value": "category", "label": label, "unavailable": ""})
    if review.get("agent_id"):
        label = f"this agent, {review['agent_id']}, only (reaches {reach['agent']} pending drafts)"
        choices.append({"value": "agent", "label": label, "unavailable": ""})
    return choices


def _form_state(review: dict[str, Any]) -> dict[str, int]:
    """The revision and version an action form names, and the last turn the page showed."""
    seen = max((t["seq"] for t in review.get("turns") or []), default=0)
    return {"revision": review["revision"], "version": review["version"], "seen_seq": seen}


def _escalation(review: dict[str, Any], who: web.Actors) -> dict[str, Any] | None:
    """Whom the draft was escalated to, by whom, and by when."""
    found = review.get("escalation")
    if not found:
        return None
    return {
        "to": escalation.target(review) or "any reviewer",
        "by": who.name(found.get("escalated_by") or ""),
        "at": found["escalated_at"],
        "deadline": found.get("deadline") or "",
        "overdue": bool(found.get("overdue")),
    }


def hold(draft: review_pb2.PacedDraft | None) -> dict[str, Any] | None:
    """What holds the draft (a rule saved after it was written) and when its agent was nudged."""
    if draft is None:
        return None
    nudged = ""
    if draft.HasField("nudged_at"):
        nudged = draft.nudged_at.ToDatetime(tzinfo=UTC).isoformat().replace("+00:00", "Z")
    return {
        "rule_text": draft.rule_text,
        "rule_high_water": draft.rule_high_water,
        "required_high_water": draft.required_high_water,
        "nudged_at": nudged,
    }
