"""spec 002 journals on SQLite and PostgreSQL: append, item_delta never journaled, sanitizing, and
settling a reviewer attempt from its journal's evidence."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from dispatch_budget.domain.budget import AttemptKind, Trigger
from reviewloop.errors import Code, DomainError
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.tenancy import ActorKind, Principal

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
RUNNER = Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_rev")
HEAD = "c" * 40


def turn(final_payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "turn_started", "session_id": "s1", "turn_id": "t1", "payload": {"prompt": "review"}},
        {
            "type": "item_started",
            "session_id": "s1",
            "turn_id": "t1",
            "payload": {"item_id": "i1", "item_type": "message"},
        },
        {
            "type": "item_delta",
            "session_id": "s1",
            "turn_id": "t1",
            "payload": {"item_id": "i1", "chunk": "Lo"},
        },
        {
            "type": "item_delta",
            "session_id": "s1",
            "turn_id": "t1",
            "payload": {"item_id": "i1", "chunk": "oks"},
        },
        {
            "type": "item_completed",
            "session_id": "s1",
            "turn_id": "t1",
            "payload": {"item_id": "i1", "item_type": "message", "content": "Looks"},
        },
        {
            "type": "turn_completed",
            "session_id": "s1",
            "turn_id": "t1",
            "payload": {"usage": {}, "iteration": 1, **final_payload},
        },
    ]


async def test_durable_events_are_journaled_with_offsets_and_deltas_are_not(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    result = await app.append_journal_events(db, RUNNER, "att_1", turn({"final": True, "evidence": "absent"}))
    assert (result.appended, result.skipped_ephemeral, result.last_offset) == (4, 2, 4)
    records = await app.read_journal(db, RUNNER, "att_1")
    assert [r.id for r in records] == [1, 2, 3, 4]
    assert "item_delta" not in {r.type for r in records}
    assert set(records[0].to_json()) == {
        "v",
        "id",
        "session_id",
        "turn_id",
        "ts",
        "family",
        "type",
        "tier",
        "payload",
        "schema_version",
    }
    assert all(r.schema_version == "1.1.0" and r.tier == "durable" and r.v == 0 for r in records)
    more = await app.append_journal_events(
        db, RUNNER, "att_1", [{"type": "error", "payload": {"reason": "x"}}]
    )
    assert more.last_offset == 5


async def test_concurrent_appends_keep_offsets_dense(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    batch = [{"type": "error", "payload": {"reason": "r"}}] * 3
    await asyncio.gather(*(app.append_journal_events(db, RUNNER, "att_1", batch) for _ in range(5)))
    assert [r.id for r in await app.read_journal(db, RUNNER, "att_1")] == list(range(1, 16))


async def test_a_bad_event_refuses_the_whole_batch(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    events: list[Any] = [{"type": "turn_started", "payload": {}}, {"type": 7, "payload": {}}]
    with pytest.raises(DomainError) as caught:
        await app.append_journal_events(db, RUNNER, "att_1", events)
    assert caught.value.code is Code.BAD_REQUEST and caught.value.violations[0].field == "/events/1/type"
    assert await app.read_journal(db, RUNNER, "att_1") == []


async def test_journals_are_per_project(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.append_journal_events(
        db, RUNNER, "att_1", turn({"final": True, "evidence": "accepted", "refs": [3]})
    )
    other = Principal("org_2", "prj_2", ActorKind.REVIEW_AGENT, "agt_x")
    assert await app.read_journal(db, other, "att_1") == []
    assert (await app.get_evidence_status(db, other, "att_1")).status.value == "unknown"


async def test_evidence_status_reads_the_closing_turn(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    assert (await app.get_evidence_status(db, RUNNER, "att_1")).status.value == "unknown"
    await app.append_journal_events(db, RUNNER, "att_1", turn({"final": False, "evidence": "accepted"}))
    assert (await app.get_evidence_status(db, RUNNER, "att_1")).status.value == "unknown"
    detail = {"refs": [9], "reason": "missing_ref", "ref": None}
    await app.append_journal_events(
        db, RUNNER, "att_1", turn({"final": True, "evidence": "rejected", "evidence_rejected": detail})
    )
    evidence = await app.get_evidence_status(db, RUNNER, "att_1")
    assert (evidence.status.value, evidence.offset, evidence.rejected) == ("rejected", 8, detail)


@pytest.mark.parametrize(
    ("final", "outcome", "reason"),
    [
        ({"evidence": "accepted", "refs": [3], "verdict": "pass", "reviewed_head": HEAD}, "counted", None),
        (
            {"refs": [3], "verdict": "issues", "reviewed_head": HEAD},
            "counted",
            None,
        ),  # legacy, grandfathered
        (
            {"evidence": "accepted", "refs": [3], "verdict": "pass", "reviewed_head": "d" * 40},
            "no_verdict",
            "unusable_result",
        ),
        ({"evidence": "rejected", "verdict": "pass", "reviewed_head": HEAD}, "no_verdict", "unusable_result"),
        ({"evidence": "absent"}, "no_verdict", "missing_result"),
        ({"verdict": "pass"}, "counted", None),  # legacy with neither: unknown fails closed
        ({"evidence": "forged", "verdict": "pass"}, "counted", None),  # unrecognized: unknown, counts
    ],
)
async def test_settling_from_the_journal_follows_the_evidence(
    open_db: OpenDb, final: dict[str, Any], outcome: str, reason: str | None
) -> None:
    db = await open_db(SPEC)
    await app.record_run(
        db,
        RUNNER,
        app.RunSnapshot(run_id="run_1", repository="acme/api", pr_number=0, head_sha=HEAD, status=None),
    )
    admitted = await app.admit_review_round(
        db,
        RUNNER,
        app.AdmissionRequest(
            run_id="run_1",
            attempt_key="k1",
            kind=AttemptKind.INITIAL,
            trigger=Trigger.OPERATOR_REQUEST,
            head_sha=HEAD,
            selection={},
        ),
    )
    await app.append_journal_events(db, RUNNER, "att_1", turn({"final": True, **final}))
    receipt, budget = await app.settle_attempt(
        db, RUNNER, receipt_id=admitted.receipt.receipt_id, journal_run_id="att_1"
    )
    assert (receipt.outcome, receipt.reason) == (outcome, reason)
    assert budget.budget.used == (1 if outcome == "counted" else 0)


async def test_an_attempt_without_a_closing_turn_settles_as_missing_result(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await app.record_run(
        db, RUNNER, app.RunSnapshot(run_id="run_1", repository="", pr_number=0, head_sha=HEAD, status=None)
    )
    admitted = await app.admit_review_round(
        db,
        RUNNER,
        app.AdmissionRequest(
            run_id="run_1",
            attempt_key="k1",
            kind=AttemptKind.INITIAL,
            trigger=Trigger.OPERATOR_REQUEST,
            head_sha=HEAD,
            selection={},
        ),
    )
    receipt, _ = await app.settle_attempt(
        db, RUNNER, receipt_id=admitted.receipt.receipt_id, journal_run_id="none"
    )
    assert (receipt.outcome, receipt.reason) == ("no_verdict", "missing_result")
