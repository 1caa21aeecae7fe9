"""A category's past drafts as the auto-send gates read them (``domain.dial_effect``): three reads,
whatever the number of drafts."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.domain.dial_effect import PastDraft
from review_state.store.tables import contacts, reviews, turns

_DECIDED = ("approve", "edit", "reject")


async def past_drafts(
    conn: AsyncConnection, project_id: str, category_id: str, limit: int
) -> list[PastDraft]:
    """The category's last ``limit`` drafts, oldest first, each with its last human decision and
    whether it was a first contact when it was written (a recipient not contacted before then)."""
    rows = (
        await conn.execute(
            select(
                reviews.c.id,
                reviews.c.confidence,
                reviews.c.created_at,
                reviews.c.to_addrs,
                reviews.c.cc_addrs,
                reviews.c.bcc_addrs,
            )
            .where(reviews.c.project_id == project_id, reviews.c.category_id == category_id)
            .order_by(reviews.c.created_at.desc(), reviews.c.id.desc())
            .limit(limit)
        )
    ).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    decisions: dict[str, str] = {}
    for turn in await conn.execute(
        select(turns.c.review_id, turns.c.action)
        .where(
            turns.c.review_id.in_(ids),
            turns.c.turn_type == "decision",
            turns.c.actor_kind == "human",
            turns.c.action.in_(_DECIDED),
        )
        .order_by(turns.c.seq)
    ):
        decisions[turn.review_id] = turn.action  # the last one wins
    recipients = {
        r.id: {a.lower() for a in [*(r.to_addrs or []), *(r.cc_addrs or []), *(r.bcc_addrs or [])]}
        for r in rows
    }
    addresses = sorted(set().union(*recipients.values()))
    contacted = {
        c.address: c.contacted_at
        for c in await conn.execute(
            select(contacts.c.address, contacts.c.contacted_at).where(
                contacts.c.project_id == project_id, contacts.c.address.in_(addresses)
            )
        )
        if c.contacted_at is not None
    }
    return [
        PastDraft(
            review_id=r.id,
            confidence=r.confidence,
            first_contact=any(a not in contacted or contacted[a] >= r.created_at for a in recipients[r.id]),
            day=r.created_at.date(),
            decision=decisions.get(r.id, ""),
        )
        for r in reversed(rows)
    ]
