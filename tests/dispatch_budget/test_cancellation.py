"""dispatch_budget's round writes are atomic under cancellation (issue 34): an admission and its
settlement, cancelled at each round trip of their units (``tests.cancellation``), then retried: one
admission, one settlement, durable, the retry a replay (a reattached receipt, an unchanged settlement)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database

from tests.cancellation import Attempt, count, each_await, observer
from tests.dispatch_budget.test_rounds import HEAD, REVIEWER, _admit, _run

_prs = itertools.count(1)
OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


@pytest.fixture
async def dbs(open_db: OpenDb) -> AsyncIterator[tuple[Database, Database]]:
    db = await open_db(SPEC)
    seen = await observer(db)
    yield db, seen
    await seen.dispose()


async def test_an_admission_cancelled_at_any_round_trip_admits_one_round(
    dbs: tuple[Database, Database],
) -> None:
    db, seen = dbs

    async def attempt() -> Attempt[app.Admission]:
        run_id = f"run_{uuid.uuid4().hex[:12]}"
        await _run(db, run_id, pr=next(_prs))  # a scope of its own

        async def call() -> app.Admission:
            return await _admit(db, run_id, run_id)

        async def verify(answer: app.Admission) -> None:
            admitted = "SELECT count(*) FROM admissions WHERE run_id = :r AND receipt_id = :id"
            assert await count(seen, admitted, r=run_id, id=answer.receipt.receipt_id) == 1
            assert await count(seen, "SELECT count(*) FROM admissions WHERE run_id = :r", r=run_id) == 1
            again = await call()
            assert again.reattached and again.receipt.receipt_id == answer.receipt.receipt_id
            assert again.budget.budget.used == 1

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 2


async def test_a_settlement_cancelled_at_any_round_trip_settles_once(dbs: tuple[Database, Database]) -> None:
    db, seen = dbs

    async def attempt() -> Attempt[tuple[app.Receipt, app.Budget]]:
        run_id = f"run_{uuid.uuid4().hex[:12]}"
        await _run(db, run_id, pr=next(_prs))  # a scope of its own
        receipt_id = (await _admit(db, run_id, run_id)).receipt.receipt_id

        async def call() -> tuple[app.Receipt, app.Budget]:
            return await app.settle_attempt(
                db, REVIEWER, receipt_id=receipt_id, verdict="pass", reviewed_head=HEAD
            )

        async def verify(answer: tuple[app.Receipt, app.Budget]) -> None:
            settled = "SELECT count(*) FROM admissions WHERE receipt_id = :id AND outcome = 'counted'"
            assert await count(seen, settled, id=receipt_id) == 1
            receipt, budget = await call()
            assert receipt.outcome == answer[0].outcome == "counted" and budget.budget.used == 1

        return Attempt(call, verify)

    assert await each_await(db, attempt) >= 2
