"""The gates a message passes on its way out: contact flags and the outbound quota, the composition
token's rule high-water, graduated auto-send, and the review-agent plane's circuit breakers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state import store
from review_state.app.env import Env
from review_state.domain.review import Review
from review_state.domain.submission import GRADUATED, Dial, auto_send_hold, breaker

QUOTA_WINDOW = timedelta(days=1)  # the outbound quota counts messages sent in the last 24 hours

log = logging.getLogger(__name__)


async def sending_facts(
    conn: AsyncConnection,
    project_id: str,
    addresses: Sequence[str],
    org_id: str = "",
    key: tuple[str, str] | None = None,
) -> store.SendingFacts:
    return await store.sending_facts(conn, project_id, addresses, utcnow() - QUOTA_WINDOW, org_id, key)


async def contacts_allow(
    env: Env, project_id: str, addresses: Sequence[str], org_id: str = ""
) -> store.SendingFacts:
    """The sending facts of ``addresses``, once ``check_contacts`` let them through (with the org's
    default policy when ``org_id`` is given). Its two reads need no common snapshot (the facts are as
    fresh at the send either way), so they skip BEGIN ... ROLLBACK."""
    async with env.db.single_statement.connect() as conn:
        facts = await sending_facts(conn, project_id, addresses, org_id)
    check_contacts(env, facts)
    return facts


def check_contacts(env: Env, facts: store.SendingFacts) -> None:
    """Blocks, unsubscribe suppression and the outbound quota: checked at submit and at delivery,
    before the intent gate (an intent would not fix them)."""
    if facts.blocked:
        raise DomainError(
            Code.RECIPIENT_BLOCKED,
            f"{', '.join(facts.blocked)} is on this project's block list; remove the recipient. "
            "Nothing was queued.",
            hints=tuple(("recipient", a) for a in facts.blocked),
        )
    if facts.suppressed:
        raise DomainError(
            Code.RECIPIENT_SUPPRESSED,
            f"{', '.join(facts.suppressed)} unsubscribed from this project's mail; remove the recipient. "
            "Nothing was queued.",
            hints=tuple(("recipient", a) for a in facts.suppressed),
        )
    quota = env.settings.outbound_quota_per_day
    if facts.sent_since >= quota:
        raise DomainError(
            Code.QUOTA_EXCEEDED,
            f"This project sent its outbound quota of {quota} messages in the last 24 hours; "
            "try again later. Nothing was queued.",
        )


def born_stale(composed_under: int, current: int, why: str = "") -> DomainError:
    """``409 born_stale``: the draft was composed under older rules (``guard`` adds its nudge)."""
    said = f" (it {why})" if why else ""
    return DomainError(
        Code.BORN_STALE,
        f"This draft was composed against rule high-water {composed_under}{said}, but the rules are at "
        f"{current}. Nothing changed: call get_rules, re-apply the stack, and resubmit with its new "
        "composition_token (or restamp_review if nothing needed to change).",
        hints=(("retry_with", "get_rules"),),
    )


async def check_token(env: Env, principal: Principal, token: str, category_id: str) -> int:
    """The token's rule high-water, or the 4xx the spec names. STALE is ``409 born_stale`` (whose
    nudge ``guard`` adds); EXPIRED / INVALID tell the agent to fetch the stack again."""
    check = await env.peers.validate_token(principal, token, category_id)
    if check.status == "valid":
        return check.token_rule_high_water
    if check.status == "stale":
        raise born_stale(check.token_rule_high_water, check.current_rule_high_water)
    raise invalid(
        "/composition_token",
        f"the token is {check.status}; fetch the rules again with get_rules and retry with its "
        "composition_token. Nothing was sent and nothing was queued",
    )


async def auto_send_gate(
    env: Env,
    principal: Principal,
    review_id: str,
    category_id: str,
    confidence: float | None,
    first_contact: bool,
) -> tuple[str | None, str, int]:
    """``auto_send_graduated``: the hold reason, or None when the category is graduated and every
    gate passes; the category's rung; and its daily auto-send cap, which ``spend_cap`` spends in the
    unit that writes the release."""
    if not category_id:
        return "no_category", "", 0
    category = await env.peers.get_category(principal, category_id)
    graduated = category.state in GRADUATED and not category.never_graduate
    dial = await env.peers.get_dial(principal, category_id) if graduated else None
    hold = auto_send_hold(
        category_id=category_id,
        category_state=category.state,
        never_graduate=category.never_graduate,
        dial=dial,
        confidence=confidence,
        first_contact=first_contact,
        review_id=review_id,
    )
    return hold, category.state, dial.auto_send_cap_per_day if dial is not None else 0


async def reviewer_breaker(env: Env, principal: Principal, review: Review) -> tuple[str | None, Dial]:
    """The circuit breakers of the review-agent plane, by name, or None when the release may go out;
    and the category's dial (its daily auto-send cap is spent by ``spend_cap`` in the decision's
    unit, its quorum counted there)."""
    dial = await env.peers.get_dial(principal, review.category_id)
    async with env.db.engine.connect() as conn:
        facts = await sending_facts(conn, review.project_id, review.recipients)
    tripped = breaker(
        dial=dial, confidence=review.confidence, first_contact=facts.first_contact, review_id=review.id
    )
    return tripped, dial


async def spend_cap(uow: UnitOfWork, project_id: str, category_id: str, cap: int) -> bool:
    """Spend one unit of the category's daily auto-send cap in ``uow``, the unit that writes the
    release; False when the cap is spent (the release is held as ``daily_cap``). The cap is per
    category: an uncategorized release has none."""
    if not category_id:
        return True
    day_start = utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
    return await store.auto_send_room(uow.conn, project_id, category_id, day_start, cap)


async def deadline_minutes(env: Env, principal: Principal, category_id: str) -> int:
    """The category's review deadline for a queued draft or its redraft (the risk dial's
    ``review_deadline_minutes``; 0: none, as for no category). The deadline only hurries a review agent
    along, so a submit does not wait on a rules context that cannot say: the draft then carries none."""
    if not category_id:
        return 0
    try:
        return (await env.peers.get_dial(principal, category_id)).review_deadline_minutes
    except DomainError as error:
        if error.code not in (Code.UNAVAILABLE, Code.NOT_FOUND):
            raise
        return 0


async def refund_uncommitted(env: Env, principal: Principal, review_id: str) -> None:
    """Give back a pool unit whose release never committed. Best effort: a lost refund leaves the pool
    under-spent (fail closed), never over."""
    try:
        await env.peers.refund_pool_send(principal, review_id)
    except Exception:
        log.warning("could not refund the pool unit of uncommitted release %s", review_id, exc_info=True)
