"""Daily auto-send caps on SQLite and PostgreSQL: atomic per category per UTC day, once per review."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from reviewloop.errors import Code, DomainError
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.tenancy import ActorKind, Principal

from tests.statements import statements

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
SYSTEM = Principal("org_1", "prj_1", ActorKind.SYSTEM, "review_state")
OTHER_PROJECT = Principal("org_1", "prj_2", ActorKind.SYSTEM, "review_state")


async def test_concurrent_sends_spend_exactly_the_cap_and_hold_the_rest(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    results = await asyncio.gather(
        *(
            app.consume_auto_send(db, SYSTEM, category_id="cat_a", review_id=f"rr_{i}", cap_per_day=5)
            for i in range(12)
        )
    )
    assert sum(r.allowed for r in results) == 5
    held = [r for r in results if not r.allowed]
    assert len(held) == 7 and all(r.used_today == 5 for r in held)


async def test_a_retry_for_the_same_review_spends_nothing_more(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    first = await app.consume_auto_send(db, SYSTEM, category_id="cat_a", review_id="rr_1", cap_per_day=2)
    again = await asyncio.gather(
        *(
            app.consume_auto_send(db, SYSTEM, category_id="cat_a", review_id="rr_1", cap_per_day=2)
            for _ in range(4)
        )
    )
    assert first.allowed and first.used_today == 1
    assert all(r.allowed and r.used_today == 1 for r in again)
    second = await app.consume_auto_send(db, SYSTEM, category_id="cat_a", review_id="rr_2", cap_per_day=2)
    assert second.allowed and second.used_today == 2


async def test_a_held_send_is_not_spent_and_passes_once_the_cap_allows(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    assert (await app.consume_auto_send(db, SYSTEM, category_id="c", review_id="rr_1", cap_per_day=1)).allowed
    held = await app.consume_auto_send(db, SYSTEM, category_id="c", review_id="rr_2", cap_per_day=1)
    assert not held.allowed and held.used_today == 1
    # The dial was raised: the held review spends now (its refusal left no spend behind).
    later = await app.consume_auto_send(db, SYSTEM, category_id="c", review_id="rr_2", cap_per_day=2)
    assert later.allowed and later.used_today == 2


async def test_caps_are_per_category_and_per_project(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    for principal, category in ((SYSTEM, "a"), (SYSTEM, "b"), (OTHER_PROJECT, "a")):
        result = await app.consume_auto_send(
            db, principal, category_id=category, review_id="rr_x", cap_per_day=1
        )
        assert result.allowed and result.used_today == 1


async def test_a_zero_cap_holds_every_send(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    result = await app.consume_auto_send(db, SYSTEM, category_id="c", review_id="rr_1", cap_per_day=0)
    assert not result.allowed and result.used_today == 0


@pytest.mark.parametrize(
    ("category", "review", "cap", "field"),
    [("", "rr_1", 1, "/category_id"), ("c", "", 1, "/review_id"), ("c", "rr_1", -1, "/cap_per_day")],
)
async def test_bad_input_is_refused_naming_the_field(
    open_db: OpenDb, category: str, review: str, cap: int, field: str
) -> None:
    db = await open_db(SPEC)
    with pytest.raises(DomainError) as caught:
        await app.consume_auto_send(db, SYSTEM, category_id=category, review_id=review, cap_per_day=cap)
    assert caught.value.code is Code.BAD_REQUEST and caught.value.violations[0].field == field


async def test_a_spend_runs_only_statements_compiled_before(open_db: OpenDb) -> None:
    """Its INSERT ... ON CONFLICT rows (the spend, the day's counter) come from the compiled cache."""
    db = await open_db(SPEC)
    await app.consume_auto_send(db, SYSTEM, category_id="cat_a", review_id="rr_1", cap_per_day=5)
    with statements(db) as seen:
        spent = await app.consume_auto_send(db, SYSTEM, category_id="cat_a", review_id="rr_2", cap_per_day=5)
    assert (spent.allowed, spent.used_today) == (True, 2)
    assert any("ON CONFLICT" in s.sql for s in seen)
    assert [s.sql for s in seen if not s.cached] == []
