"""The review a submit creates (spec 000 "Where a review comes from"): from what its checks and gates
found, where it starts (queued for a reviewer, or released) and how it goes out. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from review_state.domain.decision import review_deadline
from review_state.domain.machine import State
from review_state.domain.review import Review
from review_state.domain.submission import Draft, Route, Threading, notifies_humans


@dataclass(frozen=True)
class Composed:
    """What a submit found before its unit of work: who composes it, the materialized draft and how it
    threads, the route the review policy gave it, and the gates' verdicts."""

    review_id: str
    org_id: str
    project_id: str
    agent_id: str
    category_id: str
    kind: str  # send | reply | forward
    draft: Draft
    threading: Threading
    from_address: str
    parent_id: str | None
    confidence: float | None
    token_named: bool  # it named its rule snapshot (a composition_token)
    mode: str  # the mode the agent asked for ("" for none)
    route: Route
    hold: str | None = None  # the auto-send gate (or the pool) that holds it for a human
    rung: str = ""  # an auto-send candidate's category state
    deadline_minutes: int = 0  # a review agent's time to decide it (0: no deadline)


@dataclass(frozen=True)
class Submitted:
    """The new review, and how it goes out: ``send_path`` None for one queued for a reviewer."""

    review: Review
    send_path: str | None
    notify_humans: bool  # an auto-send in an ``auto_notify`` category tells the project's humans


def released(route: Route, held: str | None) -> bool:
    """A direct send is released; an auto-send candidate is when no gate holds it; the rest queue."""
    return route is Route.DIRECT or (route is Route.AUTO_CANDIDATE and held is None)


def submitted(composed: Composed, now: datetime, held: str | None, rule_high_water: int) -> Submitted:
    """The review ``composed`` makes at ``now``, held by ``held`` (the gates', or the daily cap its unit
    found spent) and composed under ``rule_high_water``."""
    c, draft = composed, composed.draft
    out = released(c.route, held)
    review = Review(
        id=c.review_id,
        org_id=c.org_id,
        project_id=c.project_id,
        agent_id=c.agent_id,
        category_id=c.category_id,
        kind=c.kind,
        state=State.APPROVED if out else State.NEEDS_REVIEW,
        revision=1,
        version=1,
        to=list(draft.to),
        cc=list(draft.cc),
        bcc=list(draft.bcc),
        subject=draft.subject,
        body_text=draft.body_text,
        intent=draft.intent,
        created_at=now,
        updated_at=now,
        body_html=draft.body_html,
        reply_to=draft.reply_to,
        headers=dict(draft.headers),
        attachments=tuple(draft.attachments),
        from_address=c.from_address,
        confidence=c.confidence,
        rule_high_water=rule_high_water,
        # Without a token the draft named no rule snapshot: the high-water is the stack's now (a rule
        # saved after it still leaves it stale), not rules its agent read.
        rule_snapshot_unnamed=not c.token_named,
        parent_message_id=c.parent_id,
        in_reply_to=c.threading.in_reply_to,
        references_hdr=c.threading.references,
        thread_ref=c.threading.thread_ref,
        gate_outcome=(f"held:{held}" if held else "") if c.route is Route.AUTO_CANDIDATE else None,
        review_deadline=None if out else review_deadline(now, c.deadline_minutes),
        mode=c.mode or None,
    )
    if not out:
        return Submitted(review, None, notify_humans=False)
    auto = c.route is Route.AUTO_CANDIDATE
    return Submitted(review, "graduated_auto" if auto else "agent_direct", auto and notifies_humans(c.rung))
