"""The shared-pool auto-send governor on SQLite and PostgreSQL (issue 35): a deployment-wide budget per
sending domain, shared across orgs and projects, spent with a receipt before a release, refunded only
when the send never happened (the no-refund rules of review rounds), never passed under races."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest
from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from dispatch_budget.domain.pool import Outcome, PoolBudgets, parse_budgets, sending_pool
from reviewloop.errors import Code, DomainError
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.tenancy import ActorKind, Principal

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
ORG_A = Principal("org_a", "prj_a", ActorKind.AGENT, "agt_a")
ORG_B = Principal("org_b", "prj_b", ActorKind.AGENT, "agt_b")
OPERATOR = Principal("*", "*", ActorKind.ADMIN, "bootstrap")
BUDGETS = PoolBudgets(100, {"shared.example": 3})


async def test_two_orgs_sharing_a_domain_stop_at_the_pool_budget(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    first = [
        await app.consume_pool_send(db, BUDGETS, who, sender="ops@Shared.Example", review_id=f"rr_{i}")
        for i, who in enumerate((ORG_A, ORG_B, ORG_A, ORG_B))
    ]
    assert [r.allowed for r in first] == [True, True, True, False]
    assert (first[3].receipt_id, first[3].used_today, first[3].budget_per_day) == ("", 3, 3)
    # A retry of an allowed release answers its receipt and spends nothing more.
    again = await app.consume_pool_send(db, BUDGETS, ORG_A, sender="ops@shared.example", review_id="rr_0")
    assert (again.allowed, again.receipt_id, again.used_today) == (True, first[0].receipt_id, 3)
    # Another domain is another pool, on the default budget.
    other = await app.consume_pool_send(db, BUDGETS, ORG_A, sender="a@other.example", review_id="rr_9")
    assert (other.allowed, other.pool, other.budget_per_day) == (True, "other.example", 100)
    listed = await app.list_send_pools(db, BUDGETS, OPERATOR)
    assert [(p.pool, p.used, budget) for p, budget in listed.pools] == [
        ("other.example", 1, 100),
        ("shared.example", 3, 3),
    ]
    with pytest.raises(DomainError) as caught:
        await app.list_send_pools(db, BUDGETS, Principal("org_a", "prj_a", ActorKind.ADMIN, "adm"))
    assert caught.value.code is Code.FORBIDDEN_SCOPE


async def test_a_refund_comes_back_once_and_only_when_the_send_never_happened(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    for i in range(3):
        assert (
            await app.consume_pool_send(db, BUDGETS, ORG_A, sender="x@shared.example", review_id=f"rr_{i}")
        ).allowed
    full = await app.consume_pool_send(db, BUDGETS, ORG_B, sender="y@shared.example", review_id="rr_b")
    assert not full.allowed
    refunded = await app.settle_pool_send(db, BUDGETS, ORG_A, review_id="rr_0", outcome=Outcome.NOT_SENT)
    assert (refunded.status, refunded.used_today) == ("refunded", 2)
    again = await app.settle_pool_send(db, BUDGETS, ORG_A, review_id="rr_0", outcome=Outcome.NOT_SENT)
    assert (again.status, again.used_today) == ("refunded", 2)  # a repeat refunds nothing more
    assert (
        await app.consume_pool_send(db, BUDGETS, ORG_B, sender="y@shared.example", review_id="rr_c")
    ).allowed
    # Delivered: spent for good. Unknown past DATA: kept, never refunded; evidence may still say sent.
    assert (
        await app.settle_pool_send(db, BUDGETS, ORG_A, review_id="rr_1", outcome=Outcome.SENT)
    ).status == "sent"
    kept = await app.settle_pool_send(db, BUDGETS, ORG_A, review_id="rr_2", outcome=Outcome.UNKNOWN)
    assert (kept.status, kept.used_today) == ("kept", 3)
    for review in ("rr_1", "rr_2"):
        with pytest.raises(DomainError) as caught:
            await app.settle_pool_send(db, BUDGETS, ORG_A, review_id=review, outcome=Outcome.NOT_SENT)
        assert caught.value.code is Code.CONFLICT
    assert (
        await app.settle_pool_send(db, BUDGETS, ORG_A, review_id="rr_2", outcome=Outcome.SENT)
    ).status == "sent"
    with pytest.raises(DomainError) as caught:  # a refunded unit never becomes a send
        await app.settle_pool_send(db, BUDGETS, ORG_A, review_id="rr_0", outcome=Outcome.SENT)
    assert caught.value.code is Code.CONFLICT
    # Only the receipt's project settles it: another tenant's review reads as absent.
    with pytest.raises(DomainError) as caught:
        await app.settle_pool_send(db, BUDGETS, ORG_B, review_id="rr_1", outcome=Outcome.NOT_SENT)
    assert caught.value.code is Code.NOT_FOUND
    listed = await app.list_send_pools(db, BUDGETS, OPERATOR)
    assert [(p.pool, p.used, p.refunded, p.kept) for p, _ in listed.pools] == [("shared.example", 3, 1, 0)]


@pytest.mark.parametrize("seed", range(4))
async def test_no_race_of_consumes_retries_and_settlements_takes_the_pool_over_its_budget(
    open_db: OpenDb, seed: int
) -> None:
    """Property: whatever interleaving of consumes (two orgs, retries of the same review), refunds,
    sends and unknown outcomes runs concurrently, the pool's counter equals its unrefunded receipts and
    never passes the budget, and every refund came back exactly once."""
    db = await open_db(SPEC)
    rng = random.Random(seed)
    budget = rng.randint(1, 6)
    budgets = PoolBudgets(1000, {"race.example": budget})
    whos = (ORG_A, ORG_B)
    reviews = [(whos[i % 2], f"rr_{i}") for i in range(rng.randint(budget + 2, 3 * budget + 6))]
    allowed: set[tuple[str, str]] = set()

    async def consume(who: Principal, review: str) -> None:
        result = await app.consume_pool_send(db, budgets, who, sender="a@race.example", review_id=review)
        assert result.used_today <= budget
        if result.allowed:
            allowed.add((who.project_id, review))

    async def settle(who: Principal, review: str, outcome: Outcome) -> None:
        try:
            result = await app.settle_pool_send(db, budgets, who, review_id=review, outcome=outcome)
        except DomainError as error:  # not consumed (yet, or refused), or a contradicting settlement
            assert error.code in (Code.NOT_FOUND, Code.CONFLICT)
        else:
            assert result.used_today <= budget

    for _round in range(3):
        calls: list[Awaitable[None]] = []
        for who, review in reviews:
            for _ in range(rng.randint(0, 2)):
                calls.append(consume(who, review))
            if rng.random() < 0.6:
                calls.append(settle(who, review, rng.choice(list(Outcome))))
        rng.shuffle(calls)
        await asyncio.gather(*calls)
        listed = await app.list_send_pools(db, budgets, OPERATOR)
        ((pool, _),) = listed.pools
        assert pool.used <= budget
        live = 0
        for who, review in reviews:
            receipt = await app.consume_pool_send(db, budgets, who, sender="a@race.example", review_id=review)
            live += receipt.allowed and receipt.status in ("consumed", "sent", "kept")
            if receipt.allowed and receipt.receipt_id:
                allowed.add((who.project_id, review))
        # The counter is exactly the units held (the probes above are retries or fresh spends).
        listed = await app.list_send_pools(db, budgets, OPERATOR)
        ((pool, _),) = listed.pools
        assert pool.used == live <= budget


def test_the_pool_is_the_senders_domain_and_budgets_parse_from_the_environment() -> None:
    assert sending_pool("Ops <ops@Mail.Example.COM>") == "mail.example.com"
    assert sending_pool("shared.example") == "shared.example"
    with pytest.raises(DomainError):
        sending_pool("nobody")
    budgets = parse_budgets("50", "a.example=2, B.example=0")
    assert (budgets.of("a.example"), budgets.of("b.example"), budgets.of("c.example")) == (2, 0, 50)
    assert parse_budgets("", "").default > 0  # a deployment always has a finite default
    with pytest.raises(ValueError, match="domain=N"):
        parse_budgets("", "a.example")


async def test_a_refunded_receipt_is_spent_anew_by_the_reviews_next_release_once(open_db: OpenDb) -> None:
    """A review agent's release held after its unit came back may release later: the same receipt
    spends a new unit (refunded -> consumed), once, and only with room in the pool."""
    db = await open_db(SPEC)
    budgets = PoolBudgets(100, {"shared.example": 1})
    first = await app.consume_pool_send(db, budgets, ORG_A, sender="a@shared.example", review_id="rr_1")
    await app.settle_pool_send(db, budgets, ORG_A, review_id="rr_1", outcome=Outcome.NOT_SENT)
    assert (
        await app.consume_pool_send(db, budgets, ORG_B, sender="b@shared.example", review_id="rr_b")
    ).allowed
    full = await app.consume_pool_send(db, budgets, ORG_A, sender="a@shared.example", review_id="rr_1")
    assert (full.allowed, full.used_today) == (False, 1)  # no room: still refunded, nothing taken
    await app.settle_pool_send(db, budgets, ORG_B, review_id="rr_b", outcome=Outcome.NOT_SENT)
    again = await asyncio.gather(
        *(
            app.consume_pool_send(db, budgets, ORG_A, sender="a@shared.example", review_id="rr_1")
            for _ in range(8)
        )
    )
    assert {(r.allowed, r.receipt_id, r.used_today) for r in again} == {(True, first.receipt_id, 1)}
