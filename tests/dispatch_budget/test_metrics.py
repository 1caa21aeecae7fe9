"""dispatch_budget's scrape: admissions by outcome, launch refusals and gate decisions by source, read
from the store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from dispatch_budget.__main__ import SPEC, probes
from dispatch_budget.store import tables
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database

OpenDb = Callable[[ServiceSpec[Any]], Awaitable[Database]]


async def test_gate_decisions_are_counted_by_source(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    now = datetime.now(UTC)
    async with db.transaction() as uow:
        for source in ("counters", "counters", "jev"):
            await uow.conn.execute(
                tables.gate_decisions.insert().values(
                    project_id="prj_1",
                    session_id="s",
                    record={"source": source, "decision": "review"},
                    at=now,
                )
            )
    (probe,) = probes(SimpleNamespace(db=db))  # type: ignore[arg-type]
    found = await probe()
    by_source = {attrs["source"]: value for value, attrs in found["reviewloop.budget.gate_decisions"]}
    assert by_source == {"counters": 2.0, "jev": 1.0}
    assert found["reviewloop.budget.launch_refusals"] == [(0.0, {})]
