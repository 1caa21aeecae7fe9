"""The journal keeps what the producer wrote (spec 002, issue 14), fed the corpus in ``corpus/`` (the
producer's format: 1.0.0 without the marker, 1.1.0 with it, a 1.2.0 chain and a tampered one), on
SQLite and PostgreSQL, through the gateway's JSON-lines body where a user sends it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from reviewloop.errors import Code, DomainError
from reviewloop.tenancy import ActorKind, Principal

from tests.conftest import Api
from tests.dispatch_budget.test_selection import OpenDb
from tests.e2e.test_bad_input import assert_problem

CORPUS = Path(__file__).parent / "corpus"
RUNNER = Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_rev")
NDJSON = {"content-type": "application/x-ndjson"}


def lines(name: str) -> list[str]:
    # The file's own lines: split on "\n" only, as the producer wrote them.
    return (CORPUS / name).read_text(encoding="utf-8").split("\n")[:-1]


def records(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(name)]


async def _reviewer(api: Api) -> dict[str, str]:
    project = await api.project()
    return api.auth((await api.key(project["project_id"], "review_agent"))["api_key"])


async def _post(api: Api, headers: dict[str, str], run: str, body: str) -> Any:
    return await api.http.post(
        f"/v1/journals/{run}/events", content=body.encode(), headers={**headers, **NDJSON}
    )


@pytest.mark.parametrize("name", ["v1_0_0.jsonl", "v1_1_0.jsonl", "v1_2_0.jsonl"])
async def test_every_record_is_journaled_exactly_as_the_producer_wrote_it(open_db: OpenDb, name: str) -> None:
    db = await open_db(SPEC)
    written = records(name)
    result = await app.append_journal_events(db, RUNNER, "att", written)
    assert (result.appended, result.last_offset) == (len(written), len(written))
    stored = await app.read_journal(db, RUNNER, "att")
    # Never restamped, never rewritten: schema_version, hash/prev_hash, scope, provenance, actor,
    # branch_id, a null turn_id, the producer's ids and ts all as written.
    assert [r.to_json() for r in stored] == written


async def test_the_corpus_through_the_gateway(api: Api) -> None:
    reviewer = await _reviewer(api)
    expected = {"v1_0_0.jsonl": ("1.0.0", "accepted"), "v1_1_0.jsonl": ("1.1.0", "rejected")}
    expected["v1_2_0.jsonl"] = ("1.2.0", "accepted")
    for name, (version, evidence) in expected.items():
        run = name.removesuffix(".jsonl").replace("_", "-")
        # U+2028, U+2029 and U+0085 inside JSON strings (v1_1_0) do not split a line.
        response = await _post(api, reviewer, run, "\n".join(lines(name)) + "\n")
        assert response.status_code == 201, response.text
        assert response.json()["appended"] == len(lines(name))
        status = (await api.http.get(f"/v1/journals/{run}/evidence", headers=reviewer)).json()
        assert (status["schema_version"], status["evidence"], status["offset"]) == (version, evidence, 5)
        if evidence == "rejected":
            # evidence_rejected.ref still names offset 2: the tool_use the done gate refused.
            assert status["evidence_rejected"] == {"refs": [2], "reason": "not_evidence", "ref": 2}
        # It reads back byte for byte: the producer's key order, spacing and text, nothing re-encoded.
        back = await api.http.get(f"/v1/journals/{run}/events", headers=reviewer)
        assert back.content == (CORPUS / name).read_bytes() and "x-reencoded" not in back.headers


async def test_records_journaled_before_lines_were_kept_read_back_marked_reencoded(open_db: OpenDb) -> None:
    """A row from before the ``verbatim`` column holds the service's canonical JSON (keys sorted): the
    read-back cannot give the producer's bytes back, so it names the record as re-encoded."""
    from dispatch_budget.domain.journal import canonical_line
    from dispatch_budget.store.tables import journal_events, journal_heads

    db = await open_db(SPEC)
    written = records("v1_1_0.jsonl")
    async with db.transaction() as uow:
        await uow.conn.execute(journal_heads.insert().values(project_id="prj_1", run_id="att", last_offset=1))
        await uow.conn.execute(
            journal_events.insert().values(
                project_id="prj_1",
                run_id="att",
                offset=1,
                type=written[0]["type"],
                record=canonical_line(written[0]),
            )
        )
    await app.append_journal_events(db, RUNNER, "att", written[1:3], lines("v1_1_0.jsonl")[1:3])
    page = await app.read_journal_lines(db, RUNNER, "att")
    assert page.reencoded == [1]
    assert page.lines == [
        canonical_line(written[0]) + "\n",
        *(line + "\n" for line in lines("v1_1_0.jsonl")[1:3]),
    ]


async def test_a_tampered_chain_is_refused_at_its_first_bad_offset_and_nothing_is_written(api: Api) -> None:
    reviewer = await _reviewer(api)
    refused = assert_problem(
        await _post(api, reviewer, "tampered", "\n".join(lines("v1_2_0_tampered.jsonl")) + "\n"),
        422,
        "bad_request",
    )
    assert "offset 3" in str(refused["detail"]) and "hash chain broken" in str(refused["detail"])
    assert (await api.http.get("/v1/journals/tampered/evidence", headers=reviewer)).json()[
        "evidence"
    ] == "unknown"
    # The untampered chain then goes in whole, from offset 1.
    assert (await _post(api, reviewer, "tampered", "\n".join(lines("v1_2_0.jsonl")))).status_code == 201


async def test_a_chain_continues_across_batches_and_a_broken_link_is_refused(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    chained = records("v1_2_0.jsonl")
    await app.append_journal_events(db, RUNNER, "att", chained[:2])
    relinked = {**chained[2], "prev_hash": "0" * 64}  # claims to start a new chain mid-journal
    with pytest.raises(DomainError) as caught:
        await app.append_journal_events(db, RUNNER, "att", [relinked])
    assert caught.value.code is Code.BAD_REQUEST and "offset 3" in caught.value.detail
    assert ("offset", "3") in caught.value.hints
    result = await app.append_journal_events(db, RUNNER, "att", chained[2:])
    assert (result.appended, result.last_offset) == (3, 5)


async def test_producer_ids_are_offsets_a_resend_is_idempotent_a_gap_or_overlap_refuses(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    written = records("v1_1_0.jsonl")
    await app.append_journal_events(db, RUNNER, "att", written[:4])
    again = await app.append_journal_events(db, RUNNER, "att", written[:4])
    assert (again.appended, again.already_journaled, again.last_offset) == (0, 4, 4)
    # An overlapping re-send that carries the next records appends only those.
    more = await app.append_journal_events(db, RUNNER, "att", written[2:5])
    assert (more.appended, more.already_journaled, more.last_offset) == (1, 2, 5)
    for bad, why in (
        ([written[6]], "gap"),
        ([{**written[4], "payload": {"final": True, "evidence": "accepted"}}], "different content"),
    ):
        with pytest.raises(DomainError) as caught:
            await app.append_journal_events(db, RUNNER, "att", bad)
        assert caught.value.code is Code.BAD_REQUEST and why in caught.value.detail
    assert [r.id for r in await app.read_journal(db, RUNNER, "att")] == [1, 2, 3, 4, 5]


async def test_unknown_types_null_turn_ids_and_ephemeral_tiers(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    written = records("v1_1_0.jsonl")
    live = {**written[3], "id": 6, "tier": "ephemeral", "type": "item_completed"}
    result = await app.append_journal_events(db, RUNNER, "att", [*written[:5], live, {**written[5], "id": 6}])
    assert (result.appended, result.skipped_ephemeral, result.last_offset) == (6, 1, 6)
    stored = await app.read_journal(db, RUNNER, "att")
    approval = stored[-1]
    assert approval.type == "approval_requested" and approval.kind == "unknown"
    assert approval.turn_id is None and approval.to_json()["turn_id"] is None
    assert all(r.tier == "durable" for r in stored)


async def test_concurrent_resends_of_one_batch_journal_it_once(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    chained = records("v1_2_0.jsonl")
    results = await asyncio.gather(*(app.append_journal_events(db, RUNNER, "att", chained) for _ in range(4)))
    assert sorted(r.appended for r in results) == [0, 0, 0, 5]
    assert [r.to_json() for r in await app.read_journal(db, RUNNER, "att")] == chained
