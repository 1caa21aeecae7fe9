"""The reviewer's pages: the queue (live over server-sent events), the review page and its actions. Every
action goes through the same gRPC call, authority and idempotency as the JSON route of the same verb."""

from __future__ import annotations

import asyncio
import base64
import difflib
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from reviewloop.errors import Code, DomainError
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import (
    DeliveryResolutionIn,
    MessagePreviewIn,
    OpenIn,
    PostReviewChatRequest,
    ReviewerDecisionRequest,
    UndoDecisionIn,
)
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response, StreamingResponse

from gateway.commands import reviews as commands
from gateway.commands import rules as rule_commands
from gateway.commands.reviews import STATES as _STATES
from gateway.console import escalation, presence, queue_view, rule_proposal, web
from gateway.console.html import page, render
from gateway.console.sessions import Session
from gateway.console.undo import NOTES, Window, my_window, open_window, undo_toast
from gateway.console.warnings import hidden_html, unnamed_rule_snapshot, warnings
from gateway.translate.reviews import as_review

router = APIRouter()

# The drafts a human can act on, oldest first.
PENDING = ("needs_review", "in_review", "chatting")
PAST = {"approve": "Approved", "edit": "Edited and approved", "reject": "Rejected", "escalate": "Escalated"}
LIVE_POLL_S = 1.0


async def _list(
    request: Request,
    session: Session,
    states: list[str],
    category_id: str = "",
    *,
    humans_notified: bool = False,
    limit: int = 200,
) -> list[dict[str, Any]]:
    reply = await queue_view.list_reviews(
        request, session, states, category_id, limit=limit, humans_notified=humans_notified
    )
    return [as_review(r) for r in reply.reviews]


async def pending_oldest_first(
    request: Request, session: Session, category_id: str = ""
) -> list[dict[str, Any]]:
    return list(reversed(await _list(request, session, list(PENDING), category_id)))


async def category_names(request: Request, session: Session) -> dict[str, str]:
    """The project's categories, id -> name (the queue shows and filters by name)."""
    reply = await rule_commands.list_categories(web.backend(request), session.principal)
    return {c.id: c.name for c in reply.categories}


async def held_by_rule(
    request: Request, session: Session, category_ids: set[str]
) -> dict[str, review_pb2.PacedDraft]:
    """The drafts a rule holds (born_stale: composed under older rules, waiting for their agent to
    re-apply them), by review id: one pacing read per category named, however long the queue."""
    backend = web.backend(request)
    replies = await asyncio.gather(
        *(commands.pacing_state(backend, session.principal, c) for c in sorted(category_ids))
    )
    return {
        d.review_id: d for reply in replies for d in reply.drafts if d.required_high_water > d.rule_high_water
    }


def _summary(review: dict[str, Any]) -> str:
    intent = review.get("intent") or {}
    return str(intent.get("summary") or review["subject"] or review["id"])


def _recipients(review: dict[str, Any]) -> str:
    return ", ".join([*review["to"], *review["cc"], *review["bcc"]])


# --- the queue ------------------------------------------------------------------------------------


SPLITS = {
    "": "All pending",
    escalation.SPLIT: escalation.LABEL,
    "needs_review": "Needs review",
    "in_review": "Being reviewed",
    "escalated": "Escalated",
    "overdue": "Overdue",
    "held": "Held by a rule",
    "parked": "Parked sends",
    "auto_sent": "Sent without review",
}
BATCH_MAX = 50
CURRENT = ' aria-current="page"'


def _split_of(review: dict[str, Any], held: Mapping[str, Any]) -> set[str]:
    """The splits a pending draft belongs to."""
    out = {"", "held" if review["id"] in held else review["state"]}
    if review["state"] == "chatting":
        out.add("in_review")
    return out


@router.get("/queue")
async def queue(request: Request) -> Response:
    session = await web.reader(request)
    state = request.query_params.get("state", "")
    category = request.query_params.get("category", "")
    split = request.query_params.get("split", "")
    split = split if split in SPLITS and state not in _STATES else ""
    states = [state] if state in _STATES else list(PENDING)
    (
        listing,
        escalated_reply,
        overdue_reply,
        parked,
        mine_reply,
        (auto_sent, auto_sent_count),
    ) = await asyncio.gather(
        queue_view.listing(request, session, states, category),
        # the escalated pending drafts, and those past their escalation deadline: their ids (a split
        # and a badge) and counts
        queue_view.list_reviews(request, session, list(PENDING), category, escalated=True),
        queue_view.list_reviews(request, session, list(PENDING), category, overdue=True),
        queue_view.list_reviews(  # the parked sends: their count, and the split's rows when it is shown
            request, session, [], category, parked=True, limit=queue_view.LISTED if split == "parked" else 1
        ),
        escalation.escalated_to_me(request, session, PENDING, category),
        queue_view.sent_without_review(request, session, category, rows=split == "auto_sent"),
    )
    listed = listing.reviews
    escalated = {r.id for r in escalated_reply.reviews}
    overdue = {r.id for r in overdue_reply.reviews}
    names, open_by, held, who, auto_notified = await asyncio.gather(
        category_names(request, session),
        presence.by_review(request, session),
        held_by_rule(request, session, {r.get("category_id") or "" for r in listed if r["state"] in PENDING}),
        web.actors(request, session),
        _list(request, session, [], category, humans_notified=True, limit=AUTO_NOTIFIED_SHOWN),
    )
    counts = {name: 0 for name in SPLITS}
    for review in listed:
        if review["state"] in PENDING:
            for name in _split_of(review, held):
                counts[name] = counts.get(name, 0) + 1
            if review["id"] in escalated:
                counts["escalated"] += 1
    counts["parked"] = parked.total
    mine = {r.id for r in mine_reply.reviews}
    counts[escalation.SPLIT] = mine_reply.total
    counts["overdue"] = overdue_reply.total
    counts["auto_sent"] = auto_sent_count
    reviews = [r for r in listed if split in _split_of(r, held)] if split else listed
    if split == "escalated":
        reviews = [r for r in listed if r["id"] in escalated]
    if split == escalation.SPLIT:
        reviews = [r for r in listed if r["id"] in mine]
    if split == "overdue":
        reviews = [r for r in listed if r["id"] in overdue]
    if split == "parked":
        reviews = [as_review(r) for r in reversed(parked.reviews)]
    if split == "auto_sent":
        reviews = auto_sent
    reviews = escalation.mine_first(reviews, mine)  # the escalated reviewer sees theirs first

    def category_of(review: dict[str, Any]) -> str:
        category_id = str(review.get("category_id") or "")
        return str(names.get(category_id, category_id or "—"))

    rows = [
        {
            "id": review["id"],
            "revision": review["revision"],
            "version": review["version"],
            "pickable": review["state"] in PENDING,
            "summary": _summary(review),
            "agent": who.name(review.get("agent_id") or ""),
            "category": category_of(review),
            "kind": review["kind"],
            "recipients": _recipients(review),
            "created_at": review["created_at"],
            "deadline": (review.get("escalation") or {}).get("deadline", ""),
            "overdue": bool((review.get("escalation") or {}).get("overdue")),
            "state": review["state"],
            "held": review["id"] in held,
            "escalated": escalation.target(review),
            "first_contact": review["id"] in listing.first_contact,
            "warnings": len(warnings(review)),
            "open_by": ", ".join(open_by.get(review["id"], [])),
        }
        for review in reviews
    ]
    since = max(
        (r["updated_at"] for r in listed), default=datetime.now(UTC).isoformat().replace("+00:00", "Z")
    )
    body = render(
        "queue.html",
        session=session,
        splits=[
            {
                "name": name,
                "label": label,
                "count": counts.get(name, 0),
                "query": urlencode({"split": name, "category": category}),
                "current": name == split and state not in _STATES,
            }
            for name, label in SPLITS.items()
        ],
        states=["", *_STATES],
        state=state,
        categories=[(c, names.get(c, c)) for c in ["", *sorted(names, key=names.__getitem__)]],
        category=category,
        rows=rows,
        empty=_nothing_listed(state if state in _STATES else "", names.get(category, category)),
        live="/console/events?" + urlencode({"since": since, "state": state, "category": category}),
        batch=any(r["state"] in PENDING for r in reviews),
        auto_notified=[
            {
                "id": r["id"],
                "summary": _summary(r),
                "category": category_of(r),
                "recipients": _recipients(r),
                "created_at": r["created_at"],
                "state": r["state"],
            }
            for r in auto_notified
        ],
        auto_notified_shown=AUTO_NOTIFIED_SHOWN,
    )
    return page(
        "Review queue",
        body,
        session=session,
        active="queue",
        announce=await _announcement(request, session),
        toast=await undo_toast(request, session),
    )


@router.post("/batch")
async def batch(request: Request) -> Response:
    """Decide the drafts selected in the queue, each on its own compare-and-set (the revision and version
    the queue showed), each with its own result line. A batch approves no draft whose warnings the queue
    did not show in full, nor one a rule holds: those are refused with a line saying to open them."""
    session, form = await web.writer(request)
    action = web.field(form, "action")
    reason = web.field(form, "feedback").strip()
    picks = [str(v) for v in form.getlist("pick")][:BATCH_MAX]
    lines: list[tuple[str, Window | None]] = []
    if action not in ("approve", "reject"):
        lines.append(("Nothing was done: pick approve or reject.", None))
    elif action == "reject" and not reason:
        lines.append(("Nothing was done: a reject needs a reason, which the agent of each draft gets.", None))
    elif not picks:
        lines.append(("Nothing was done: select at least one draft.", None))
    else:
        pending = {r["id"]: r for r in await _list(request, session, list(PENDING))}
        held = await held_by_rule(
            request,
            session,
            {r.get("category_id") or "" for r in pending.values()} if action == "approve" else set(),
        )
        for pick in picks:
            lines.append(await _batch_one(request, session, pick, action, reason, pending, held))
    return _batch_page(session, lines)


def _batch_page(session: Session, lines: list[tuple[str, Window | None]]) -> Response:
    """A batch's result lines, each approval with its own Undo while its window is open."""
    return page(
        "Batch decision",
        render(
            "batch.html",
            session=session,
            lines=lines,
            last=max((w.until for _, w in lines if w), default=None),
        ),
        session=session,
        active="queue",
        announce=f"{len(lines)} results",
    )


@router.post("/batch/undo")
async def batch_undo(request: Request) -> Response:
    """Undo one line of a batch (``undo=<id:revision:version>``) or every line still open (``undo=all``),
    each its own ``UndoDecision`` and result line; the lines not undone keep their Undo."""
    session, form = await web.writer(request)
    chosen = web.field(form, "undo")
    backend, principal = web.backend(request), session.principal
    lines: list[tuple[str, Window | None]] = []
    for pick in [str(v) for v in form.getlist("open")][:BATCH_MAX]:
        rid, _, seen = pick.partition(":")
        revision_s, _, version_s = seen.partition(":")
        if not revision_s.isdigit() or not version_s.isdigit():
            continue
        try:
            if chosen not in ("all", pick):
                kept = await commands.get_review(backend, principal, rid)
                lines.append((f"“{_summary(as_review(kept))}” ({rid}): approved.", open_window(kept)))
                continue
            seen_at = web.shaped(UndoDecisionIn, revision=int(revision_s), version=int(version_s))
            undone = await commands.undo_decision(backend, principal, rid, seen_at, web.idempotency_key())
            lines.append((f"“{_summary(as_review(undone))}” ({rid}): undone; nothing was sent.", None))
        except web.REFUSALS as exc:
            lines.append((f"{rid}: not undone: {web.as_domain(exc).detail}", None))
    return _batch_page(session, lines or [("Nothing was undone: no line of the batch was still open.", None)])


async def _batch_one(
    request: Request,
    session: Session,
    pick: str,
    action: str,
    reason: str,
    pending: Mapping[str, dict[str, Any]],
    held: Mapping[str, Any],
) -> tuple[str, Window | None]:
    """One draft of a batch: its own compare-and-set on what the queue showed, and its result line (with
    the approval's undo window, while open)."""
    rid, _, seen = pick.partition(":")
    revision_s, _, version_s = seen.partition(":")
    review = pending.get(rid)
    if review is None or not revision_s.isdigit() or not version_s.isdigit():
        return f"{rid}: not decided: it is no longer pending.", None
    name = f"“{_summary(review)}” ({rid})"
    if action == "approve":
        found = warnings(review)
        if found:
            return (
                f"{name}: not approved: it has {len(found)} warning{'' if len(found) == 1 else 's'} a batch "
                "does not show. Open it to read them and decide.",
                None,
            )
        if rid in held:
            return f"{name}: not approved: a rule holds it. Open it to approve it as it stands.", None
    revision, version = int(revision_s), int(version_s)
    backend, principal = web.backend(request), session.principal
    try:
        if review["state"] == "needs_review":  # picked up first, on the version the queue showed
            seen_at = web.shaped(OpenIn, revision=revision, version=version)
            opened = await commands.open_review(backend, principal, rid, seen_at, web.idempotency_key())
            revision, version = opened.revision, opened.version
        decision = web.shaped(
            ReviewerDecisionRequest,
            action=action,
            revision=revision,
            version=version,
            feedback=reason if action == "reject" else "",
        )
        decided = await commands.decide(request, backend, principal, rid, decision, web.idempotency_key())
    except web.REFUSALS as exc:
        return f"{name}: not {PAST[action].lower()}: {web.as_domain(exc).detail}", None
    window = open_window(decided) if isinstance(decided, review_pb2.Review) else None
    return f"{name}: {PAST[action].lower()}.", window


def _nothing_listed(state: str, category: str) -> str:
    """What an empty queue says: the filters it was asked for, not always "waiting for review"."""
    where = f" in {category}" if category else ""
    return f"No drafts in state {state}{where}." if state else f"No drafts are waiting for review{where}."


AUTO_NOTIFIED_SHOWN = 20


async def _announcement(request: Request, session: Session) -> str:
    """What the page says once it loads (the live region, shown as a toast): the outcome of the decision
    that led here, naming the draft by its intent."""
    done, prev = request.query_params.get("done", ""), request.query_params.get("prev", "")
    if done in PAST and prev:
        try:
            decided = _summary(await _get(request, session, prev))
        except DomainError:
            return f"{PAST[done]} {prev}."
        return f"{PAST[done]} “{decided}” ({prev})."
    if done == "open":
        return "Opened for review; you have it now."
    if done == "resolved":
        return "Delivery closed; the resolution is recorded."
    if done in NOTES:
        return NOTES[done]
    return ""


@router.get("/events")
async def events(request: Request) -> Response:
    """Server-sent events: every change to a draft of this project after ``Last-Event-ID`` (or ``since``),
    with the id of each event the ``updated_at`` it carries, so a reconnect resumes where it stopped."""
    session = await web.reader(request)
    since = request.headers.get("last-event-id") or request.query_params.get("since", "")
    state = request.query_params.get("state", "")
    category = request.query_params.get("category", "")
    listed = {state} if state in _STATES else set(PENDING)

    def parse(value: str) -> datetime:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return datetime.now(UTC)

    async def notified(changed: list[dict[str, Any]]) -> set[str]:
        """Which of the changed reviews went out without review in an auto_notify category (asked only
        when one of them left the pending states)."""
        if all(r["state"] in PENDING for r in changed):
            return set()
        sent = await _list(request, session, [], category, humans_notified=True, limit=AUTO_NOTIFIED_SHOWN)
        return {r["id"] for r in sent}

    async def stream() -> AsyncIterator[bytes]:
        mark = parse(since)
        shown: dict[str, list[str]] | None = None
        names: dict[str, str] | None = None
        yield b"retry: 2000\n\n"
        while not await request.is_disconnected():
            try:
                recent = await _list(request, session, [])
                changed = sorted(
                    (r for r in recent if parse(r["updated_at"]) > mark), key=lambda r: r["updated_at"]
                )
                told = await notified(changed)
                if told and names is None:
                    names = await category_names(request, session)
            except Exception:
                changed, told = [], set()
            for review in changed:
                mark = parse(review["updated_at"])
                data = {
                    "id": review["id"],
                    "state": review["state"],
                    "pending": review["state"] in PENDING,
                    "listed": review["state"] in listed
                    and (not category or review.get("category_id") == category),
                    "summary": _summary(review),
                }
                if review["id"] in told:  # a line for "Sent without review"
                    category_id = review.get("category_id") or ""
                    data["humans_notified"] = {
                        "category": (names or {}).get(category_id, category_id or "—"),
                        "recipients": _recipients(review),
                    }
                yield f"id: {review['updated_at']}\nevent: review\ndata: {json.dumps(data)}\n\n".encode()
            try:
                open_by = await presence.by_review(request, session)
            except Exception:
                open_by = shown or {}
            if open_by != shown:  # who has which draft open, whenever it changes
                shown = open_by
                yield f"event: presence\ndata: {json.dumps(open_by)}\n\n".encode()
            yield b": tick\n\n"
            await asyncio.sleep(LIVE_POLL_S)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


# --- the review page ------------------------------------------------------------------------------


async def _get(request: Request, session: Session, review_id: str) -> dict[str, Any]:
    reply = await commands.get_review(web.backend(request), session.principal, review_id)
    return {**as_review(reply), "approvers": list(reply.approvers)}


async def _quorum(request: Request, session: Session, review: dict[str, Any]) -> dict[str, Any] | None:
    """Where a pending draft of a category with a quorum stands: "2 of 3 approvals (panel of 4)" and who
    gave them, by key name where the project has one. Only approvals of the current revision count (an
    edit starts the count again)."""
    category = review.get("category_id")
    if not category or review["state"] not in PENDING:
        return None
    dial = await rule_commands.risk_dial(web.backend(request), session.principal, category)
    values = next((c.effective for c in dial.categories if c.category_id == category), dial.account)
    if values.quorum_approvals <= 1:
        return None
    names = await web.actors(request, session)
    return {
        "given": [names.name(a) for a in review["approvers"]],
        "needed": values.quorum_approvals,
        "panel": values.quorum_panel,
        "mine": session.principal.actor_id in review["approvers"],
    }


Lines = list[tuple[str, str]]  # a diff's lines, each (css class, text): "diff-del", "diff-add" or ""


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


_MARKS = {"- ": "diff-del", "+ ": "diff-add"}

# The HTML part's own frame: inline styles and <style> render as a mail client renders them; nothing
# remote loads, no script runs (the frame is sandboxed without allow-scripts, and so is this document).
FRAME_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'self'; sandbox"
)


async def _preview(
    request: Request,
    session: Session,
    review_id: str,
    edit: dict[str, str | None] | None = None,
) -> review_pb2.MessagePreview:
    """The exact message an approval (of ``edit``, when given) delivers, and its approval digest."""
    asked = web.shaped(MessagePreviewIn, **edit) if edit else None
    return await commands.preview_message(web.backend(request), session.principal, review_id, asked)


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


OUTCOMES = {"delivered": "Mark delivered", "failed": "Mark failed"}


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


async def _revisions(request: Request, session: Session, review_id: str) -> dict[int, dict[str, str]]:
    """Each kept revision's content as the lines its per-field diff compares, by revision number."""
    reply = await commands.revisions(web.backend(request), session.principal, review_id)
    return {
        r.revision: {
            "subject": r.subject,
            "to": "\n".join(r.to),
            "cc": "\n".join(r.cc),
            "bcc": "\n".join(r.bcc),
            "body_text": r.body_text,
            "body_html": r.body_html,
            "attachments": "\n".join(
                f"{a.filename} ({a.size} bytes, sha256 {a.sha256})" for a in r.attachments
            ),
        }
        for r in reply.revisions
    }


def _compare(before: dict[str, str], after: dict[str, str]) -> dict[str, Any]:
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


def _history(request: Request, revisions: dict[int, dict[str, str]]) -> dict[str, Any] | None:
    """Any two kept revisions side by side (default: the previous one against the current one)."""
    known = sorted(revisions)
    if len(known) < 2:
        return None
    a = _pick(request, "rev_a", known[-2], known)
    b = _pick(request, "rev_b", known[-1], known)
    return {"known": known, "a": a, "b": b, "compare": _compare(revisions[a], revisions[b])}


REACHED = [*PENDING, "rejected"]  # the drafts a rule saved now reaches


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


def _rule_scopes(
    review: dict[str, Any], session: Session, category_name: str, reach: dict[str, int]
) -> list[dict[str, str]]:
    """The save-as-rule scope choice: house style (the org's; an admin's only, shown to a reviewer as
    unavailable rather than hidden), this project, this category, this agent."""
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


def _hold(draft: review_pb2.PacedDraft | None) -> dict[str, Any] | None:
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


async def render_review(
    request: Request,
    session: Session,
    review: dict[str, Any],
    *,
    typed: FormData | None = None,
    refusal: dict[str, Any] | None = None,
    status: int = 200,
) -> Response:
    rid = review["id"]
    preview, who = await asyncio.gather(_preview(request, session, rid), web.actors(request, session))
    # One listing serves previous/next and the rule's reach (not the pending queue twice).
    reached = await _list(request, session, REACHED)
    ids = [r["id"] for r in reversed(reached) if r["state"] in PENDING]
    at = ids.index(rid) if rid in ids else None
    names = await category_names(request, session)
    category_name = names.get(review.get("category_id") or "", review.get("category_id") or "no category")
    others = await presence.touch(request, session, rid)
    state = review["state"]
    hold = None
    if state in PENDING:
        hold = (await held_by_rule(request, session, {review.get("category_id") or ""})).get(rid)
    intent = review.get("intent") or {}
    body = render(
        "review.html",
        session=session,
        review=review,
        body_html=review.get("body_html") or "",
        typed=lambda name, default="": web.field(typed, name, default) if typed else default,
        category_name=category_name,
        previous=ids[at - 1] if at else "",
        next=ids[at + 1] if at is not None and at + 1 < len(ids) else "",
        presence=presence.others_text(others),
        presence_every=presence.REFRESH_S,
        escalation=_escalation(review, who),
        refusal=refusal,
        hold=_hold(hold),
        warnings=warnings(review),
        snapshot_notes=unnamed_rule_snapshot(review),
        quorum=await _quorum(request, session, review),
        form_state=_form_state(review),
        sha256=preview.message_sha256,
        raw_mime=preview.raw_mime.decode("utf-8", "replace"),
        scopes=_rule_scopes(review, session, category_name, _reach(review, reached))
        if state in ("in_review", "chatting")
        else [],
        escalate_to=await escalation.targets(request, session) if state in ("in_review", "chatting") else [],
        delivery=_delivery(review),
        outcomes=OUTCOMES,
        deliverable=state in (*PENDING, "approved"),
        headers=_headers(review),
        hidden=hidden_html(review["body_html"]) if review.get("body_html") else [],
        attachments=_attachments(review),
        intent_summary=intent.get("summary") or "",
        intent_meta=json.dumps(intent.get("meta") or {}, indent=2, ensure_ascii=False),
        history=_history(request, await _revisions(request, session, rid)),
        turns=_turns(review, who),
        undo=my_window(review, session.principal.actor_id),
    )
    return page(
        _summary(review),
        body,
        session=session,
        active="queue",
        status=status,
        announce=await _announcement(request, session),
        toast=await undo_toast(request, session),
    )


@router.get("/reviews/{review_id}")
async def review_page(request: Request, review_id: str) -> Response:
    session = await web.reader(request)
    return await render_review(request, session, await _get(request, session, review_id))


def _refusal(
    request: Request, session: Session, review_id: str, form: FormData
) -> Callable[[DomainError], Awaitable[Response]]:
    """What a refused review action answers: the review page again (``_refused``)."""
    return lambda error: _refused(request, session, review_id, form, error)


async def _refused(
    request: Request, session: Session, review_id: str, form: FormData, error: DomainError
) -> Response:
    """A refused action changes nothing: show why, what changed since the page was read, and the current
    version, keeping what the reviewer typed."""
    review = await _get(request, session, review_id)
    seen = int(web.field(form, "seen_seq", "0") or 0)
    since = [t for t in review.get("turns") or [] if t["seq"] > seen]
    who = await web.actors(request, session)
    changes = [
        t["turn_type"]
        + (f" ({t['action']})" if t.get("action") else "")
        + f" by {who.name(t.get('actor_id', ''), t['actor_kind'])}"
        for t in since
    ]
    shown = f"revision {web.field(form, 'revision')}, version {web.field(form, 'version')}"
    now = f"revision {review['revision']}, version {review['version']}, state {review['state']}"
    stale = error.code in (Code.STALE, Code.WRONG_STATE, Code.TERMINAL, Code.CONFLICT)
    headline = (
        f"Refused: this draft changed since you loaded it. You saw {shown}; it is now {now}. Nothing was done."
        if stale
        else f"Refused: {error.detail}"
    )
    if ("reason", "message_changed") in error.hints:
        headline = f"Refused: {error.detail}"
    return await render_review(
        request,
        session,
        review,
        typed=form,
        refusal={"headline": headline, "changes": changes, "stale": stale},
        status=409 if stale else 422,
    )


async def _after_decision(request: Request, session: Session, review_id: str, done: str) -> Response:
    """Focus moves to the next draft (oldest first), or back to the queue when none is left."""
    queue = [r["id"] for r in await pending_oldest_first(request, session) if r["id"] != review_id]
    query = urlencode({"done": done, "prev": review_id})
    target = f"/console/reviews/{queue[0]}?{query}" if queue else f"/console/queue?{query}"
    return RedirectResponse(target, status_code=303)


@router.post("/reviews/{review_id}/open")
async def open_review(request: Request, review_id: str) -> Response:
    session, form = await web.writer(request)
    return await web.act(
        lambda: commands.open_review(
            web.backend(request),
            session.principal,
            review_id,
            web.seen_at(form, OpenIn),
            web.field(form, "idem"),
        ),
        RedirectResponse(f"/console/reviews/{review_id}?done=open", status_code=303),
        _refusal(request, session, review_id, form),
    )


@router.post("/reviews/{review_id}/decide")
async def decide(request: Request, review_id: str) -> Response:
    session, form = await web.writer(request)
    action = web.field(form, "action")

    async def work() -> Any:
        return await commands.decide(
            request,
            web.backend(request),
            session.principal,
            review_id,
            _decision(form),
            web.field(form, "idem"),
        )

    return await web.act(
        work,
        lambda _: _after_decision(request, session, review_id, action),
        _refusal(request, session, review_id, form),
    )


def _decision(form: FormData) -> ReviewerDecisionRequest:
    """The decide form as the decision's shape (the REST body)."""
    action = web.field(form, "action")
    if action not in PAST:
        raise DomainError(Code.BAD_REQUEST, "Pick an action.")
    fields: dict[str, Any] = {
        "action": action,
        "revision": web.number(form, "revision"),
        "version": web.number(form, "version"),
        "feedback": web.field(form, "feedback"),
    }
    if action in ("approve", "edit"):
        fields["message_sha256"] = web.field(form, "message_sha256") or None
    if action == "approve":
        fields["override_held"] = web.field(form, "override_held") == "yes"
    if action == "escalate":
        fields.update(escalation.chosen_target(form))
    if action == "edit":
        edit = _edit_of(form)
        fields.update(subject=edit["subject"] or "", body=edit["body"] or "", body_html=edit["body_html"])
        rule_text = web.field(form, "rule_text").strip()
        if rule_text:
            # review_state scopes a category rule to the review's own category, and checks that a
            # per-agent rule names the review's own agent, in the decision's unit; the rules context
            # refuses house style to anyone but an admin.
            scope = web.field(form, "rule_scope")
            fields["new_rule"] = {
                "rule_text": rule_text,
                "scope": "category" if scope == "category" else "general",
                "rule_layer": "org" if scope == "house" else "project",
                "scope_agent_id": web.field(form, "rule_agent") if scope == "agent" else None,
            }
    return web.shaped(ReviewerDecisionRequest, **fields)


def _edit_of(form: FormData) -> dict[str, str | None]:
    """The edit a form names: subject, text and (when the reviewer edits it) the HTML part; None for
    the HTML part regenerates it from the text."""
    own_html = web.field(form, "html_mode") == "edit"
    return {
        "subject": web.field(form, "subject"),
        "body": web.field(form, "body").replace("\r\n", "\n"),
        "body_html": web.field(form, "body_html").replace("\r\n", "\n") if own_html else None,
    }


# The rule text and scope are the save-as-rule panel's own inputs in the same form (``rule_proposal``).
_CARRIED = ("subject", "body", "body_html", "html_mode", "feedback", "rule_agent")


@router.post("/reviews/{review_id}/edit-preview")
async def edit_preview(request: Request, review_id: str) -> Response:
    """The exact message the edit would send, every part diffed against what the agent wrote and its
    warnings, with its digest: "Save edit and approve" names that digest."""
    session, form = await web.writer(request)
    if web.field(form, "back"):
        return await render_review(request, session, await _get(request, session, review_id), typed=form)
    review, edited = await asyncio.gather(
        _get(request, session, review_id), _preview(request, session, review_id, _edit_of(form))
    )
    before = {
        "subject": review["subject"],
        "body_text": review["body_text"],
        "body_html": review.get("body_html") or "",
    }
    after = {"subject": edited.subject, "body_text": edited.body_text, "body_html": edited.body_html}
    rule_panel = await rule_proposal.section(request, session, review, form, _edit_of(form))
    body = render(
        "edit_preview.html",
        session=session,
        review=review,
        warnings=warnings({**review, **after}),
        regenerated=edited.html_regenerated,
        compare=_compare(before, after),
        carried=[
            (name, web.field(form, name))
            for name in (*_CARRIED, "revision", "version", "seen_seq", "idem", "csrf")
        ],
        sha256=edited.message_sha256,
        rule_panel=rule_panel,
        raw_mime=edited.raw_mime.decode("utf-8", "replace"),
        body_text=edited.body_text,
        body_html=edited.body_html,
        hidden=hidden_html(edited.body_html) if edited.body_html else [],
    )
    return page(f"Review your edit: {_summary(review)}", body, session=session, active="queue")


@router.get("/reviews/{review_id}/html-part")
async def html_part(request: Request, review_id: str) -> Response:
    """The draft's HTML part as its own document, for the review page's sandboxed frame: its CSP lets
    inline styles render (a mail client renders them) and loads nothing remote."""
    session = await web.reader(request)
    review = await _get(request, session, review_id)
    return _frame_document(review.get("body_html") or "")


@router.post("/reviews/{review_id}/html-part")
async def html_part_of_edit(request: Request, review_id: str) -> Response:
    """An edit's HTML part (as PreviewMessage answered it) in the same frame document."""
    _, form = await web.writer(request)
    return _frame_document(web.field(form, "body_html"))


def _frame_document(body_html: str) -> Response:
    return Response(
        body_html,
        media_type="text/html; charset=utf-8",
        headers={
            "Content-Security-Policy": FRAME_CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store",
        },
    )


@router.post("/reviews/{review_id}/chat")
async def chat(request: Request, review_id: str) -> Response:
    session, form = await web.writer(request)
    text = web.field(form, "text")
    return await web.act(
        lambda: commands.post_chat(
            web.backend(request),
            session.principal,
            review_id,
            web.shaped(PostReviewChatRequest, text=text),
            web.field(form, "idem"),
        ),
        RedirectResponse(f"/console/reviews/{review_id}", status_code=303),
        _refusal(request, session, review_id, form),
    )


@router.post("/reviews/{review_id}/delivery-resolution")
async def resolve_delivery(request: Request, review_id: str) -> Response:
    """An admin closes a parked send as delivered or failed, with the reason (never a resend)."""
    session, form = await web.writer(request)

    async def resolve() -> None:
        outcome, reason = web.field(form, "outcome"), web.field(form, "reason").strip()
        web.require_admin(session)
        if outcome not in OUTCOMES or not reason:
            raise DomainError(
                Code.BAD_REQUEST, "Pick delivered or failed and give the reason (the evidence)."
            )
        evidence = web.shaped(DeliveryResolutionIn, outcome=outcome, reason=reason)
        await commands.resolve_delivery(web.backend(request), session.principal, review_id, evidence)

    return await web.act(
        resolve,
        RedirectResponse(f"/console/reviews/{review_id}?done=resolved", status_code=303),
        _refusal(request, session, review_id, form),
    )


@router.post("/reviews/{review_id}/presence")
async def review_presence(request: Request, review_id: str) -> Response:
    return await presence.refresh(request, review_id)
