"""Issue 35, "The gate fails closed", through the real gateway and service processes on both backends:
what the publication gate counts, what it refuses and why, sequence rows (Amendment 3), WARM
continuation, the Diff scope table a verdict carries, and a journal read back."""

from __future__ import annotations

from typing import Any

import orjson

from tests.conftest import Api
from tests.e2e.test_bad_input import assert_problem

BASE, MID, HEAD, OTHER = "a" * 40, "c" * 40, "b" * 40, "d" * 40
REPO = "acme/gate"
RUNNER = {
    "name": "codex",
    "models": ["gpt-5", "gpt-5-mini"],
    "efforts": ["high", "low"],
    "default_model": "gpt-5",
    "default_effort": "high",
}
ROW1 = {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "cold"}
ROW2 = {"runner": "codex", "model": "gpt-5-mini", "effort": "low", "mode": "cold"}


def scope(base: str = BASE, head: str = HEAD) -> dict[str, Any]:
    return {"base": base, "head": head, "rows": [{"path": "src/a.py", "why": "the fix", "in_scope": True}]}


ACCEPTED = {
    "final": True,
    "evidence": "accepted",
    "refs": [1],
    "verdict": "pass",
    "reviewed_head": HEAD,
    "diff_scope": scope(),
}


class Gate:
    """One project with a runner, and helpers that act as a reviewer would through the gateway."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.n = 0
        self.sessions: dict[str, str] = {}  # receipt -> the reviewer session it was admitted for

    async def setup(self) -> Gate:
        project = await self.api.project()
        pid = project["project_id"]
        self.reviewer = self.api.auth((await self.api.key(pid, "review_agent"))["api_key"])
        self.admin = self.api.auth((await self.api.key(pid, "admin"))["api_key"])
        runner = await self.api.http.post("/v1/review-rounds/runners", json=RUNNER, headers=self.admin)
        assert runner.status_code == 201, runner.text
        return self

    async def run(self, run_id: str, pr: int, head: str = HEAD, sequence: list[Any] | None = None) -> None:
        body: dict[str, Any] = {"repository": REPO, "pr_number": pr, "head_sha": head}
        if sequence:
            body["review_sequence"] = sequence
        response = await self.api.http.put(f"/v1/review-rounds/runs/{run_id}", json=body, headers=self.admin)
        assert response.status_code == 200, response.text

    async def bind(self, pr: int, selection: dict[str, str], head: str = HEAD, **extra: str) -> Any:
        response = await self.api.http.post(
            "/v1/review-rounds/sessions",
            json={
                "repository": REPO,
                "pr_number": pr,
                "base_sha": BASE,
                "head_sha": head,
                "selection": selection,
                **extra,
            },
            headers=self.reviewer,
        )
        assert response.status_code == 201, response.text
        return response.json()

    async def admit(self, run_id: str, session: str = "", kind: str = "initial", head: str = HEAD) -> str:
        self.n += 1
        response = await self.api.http.post(
            "/v1/review-rounds/admissions",
            json={
                "run_id": run_id,
                "attempt_key": f"{run_id}-{self.n}",
                "kind": kind,
                "trigger": "operator_request",
                "head_sha": head,
                "review_session_id": session,
            },
            headers=self.reviewer,
        )
        assert response.status_code == 201, response.text
        receipt_id = str(response.json()["receipt"]["receipt_id"])
        self.sessions[receipt_id] = session
        return receipt_id

    async def settle_from_journal(
        self, receipt_id: str, payload: dict[str, Any], session: str | None = None
    ) -> Any:
        """The attempt's journal, its closing record in the receipt's own session (or ``session``)."""
        journal = f"j-{receipt_id}"
        named = self.sessions.get(receipt_id, "") if session is None else session
        event = {"type": "turn_completed", "session_id": named, "turn_id": "t1", "payload": payload}
        appended = await self.api.http.post(
            f"/v1/journals/{journal}/events", json={"events": [event]}, headers=self.reviewer
        )
        assert appended.status_code == 201, appended.text
        return await self.settle(receipt_id, {"journal_run_id": journal})

    async def settle(self, receipt_id: str, body: dict[str, Any]) -> Any:
        response = await self.api.http.post(
            f"/v1/review-rounds/admissions/{receipt_id}/settlement", json=body, headers=self.reviewer
        )
        assert response.status_code == 200, response.text
        return response.json()["receipt"]

    async def gate(self, run_id: str) -> Any:
        response = await self.api.http.get(
            "/v1/review-rounds/ready-gate", params={"run_id": run_id}, headers=self.reviewer
        )
        assert response.status_code == 200, response.text
        return response.json()


def refused(gate: Any) -> dict[str, str]:
    return {r["receipt_id"]: r["reason"] for r in gate["refused_reviews"]}


async def test_unknown_or_forged_evidence_and_other_heads_never_count_and_the_gate_says_why(api: Api) -> None:
    g = await Gate(api).setup()
    await g.run("run_f", 1)
    session = (await g.bind(1, ROW1))["session_id"]
    forged = await g.admit("run_f", session)
    settled = await g.settle_from_journal(forged, {**ACCEPTED, "evidence": "ACCEPTED"})
    # The round is spent (fail closed), but no verdict is guessed from an unknown marker.
    assert settled["settlement"]["outcome"] == "counted" and "verdict" not in settled["settlement"]
    assert settled["settlement"]["evidence"] == "unknown"
    legacy = await g.admit("run_f", session)
    await g.settle_from_journal(legacy, {"final": True, "verdict": "pass", "reviewed_head": HEAD})
    other = await g.admit("run_f", session)
    await g.settle_from_journal(other, {**ACCEPTED, "reviewed_head": OTHER})
    reported = await g.admit("run_f", session)
    await g.settle(reported, {"verdict": "pass", "reviewed_head": HEAD, "diff_scope": scope()})
    # A passing line of another bound session (a copied journal) is not this attempt's evidence.
    elsewhere = (await g.bind(1, ROW1))["session_id"]
    copied = await g.admit("run_f", session)
    settled = await g.settle_from_journal(copied, ACCEPTED, session=elsewhere)
    assert settled["settlement"]["outcome"] == "counted" and "verdict" not in settled["settlement"]
    assert settled["settlement"]["evidence"] == "foreign_session"
    gate = await g.gate("run_f")
    assert (gate["qualifying_reviews"], gate["required_reviews"], gate["publishable"]) == (0, 1, False)
    why = refused(gate)
    assert "evidence unknown" in why[forged] and "evidence unknown" in why[legacy]
    assert OTHER in why[other] and "without journal evidence" in why[reported]
    assert f"names another session than {session}" in why[copied]
    assert [r["row"] for r in gate["remaining_rows"]] == [1]
    # Accepted evidence for the head, in the bound session, counts once.
    good = await g.admit("run_f", session)
    await g.settle_from_journal(good, ACCEPTED)
    gate = await g.gate("run_f")
    assert (gate["qualifying_reviews"], gate["publishable"]) == (1, True)
    assert gate["filled_rows"] == [{"row": 1, "receipt_id": good, "review_session_id": session}]


async def test_a_retry_never_adds_a_review_and_a_session_must_be_one_the_service_bound(api: Api) -> None:
    g = await Gate(api).setup()
    await g.run("run_r", 2, sequence=[ROW1, ROW1])
    # An initial attempt and its retry, both passing, naming no session: neither is a review.
    initial = await g.admit("run_r")
    await g.settle_from_journal(initial, ACCEPTED)
    retry = await g.admit("run_r", kind="retry")
    await g.settle_from_journal(retry, ACCEPTED)
    gate = await g.gate("run_r")
    assert (gate["qualifying_reviews"], gate["required_reviews"]) == (0, 2)
    assert all("names no reviewer session" in refused(gate)[r] for r in (initial, retry))
    # Made-up session ids prove nothing either.
    made_up = await g.admit("run_r", "rvs_made_up")
    await g.settle_from_journal(made_up, ACCEPTED)
    assert "never bound" in refused(await g.gate("run_r"))[made_up]
    # In a bound session: the retry and a recheck update the one review.
    session = (await g.bind(2, ROW1))["session_id"]
    first = await g.admit("run_r", session)
    await g.settle_from_journal(first, ACCEPTED)
    again = await g.admit("run_r", session, kind="retry")
    await g.settle_from_journal(again, ACCEPTED)
    gate = await g.gate("run_r")
    assert (gate["qualifying_reviews"], gate["publishable"]) == (1, False)
    assert "already counted" in refused(gate)[again]
    assert [r["row"] for r in gate["remaining_rows"]] == [2]


async def test_row_one_selects_the_pipeline_review_and_the_rest_are_requested(api: Api) -> None:
    g = await Gate(api).setup()
    await g.run("run_s", 3, sequence=[ROW1, ROW2])
    # A pipeline review that ran row 2's selection is not row 1's result.
    off = (await g.bind(3, ROW2))["session_id"]
    wrong = await g.admit("run_s", off, kind="pipeline")
    await g.settle_from_journal(wrong, ACCEPTED)
    gate = await g.gate("run_s")
    assert gate["qualifying_reviews"] == 0 and "row 1 selects" in refused(gate)[wrong]
    # COLD row 1: a passing pipeline review of the gate head is row 1's result; row 2 remains.
    pipeline_session = (await g.bind(3, ROW1))["session_id"]
    pipeline = await g.admit("run_s", pipeline_session, kind="pipeline")
    await g.settle_from_journal(pipeline, ACCEPTED)
    gate = await g.gate("run_s")
    assert [(r["row"], r["receipt_id"]) for r in gate["filled_rows"]] == [(1, pipeline)]
    assert gate["remaining_rows"] == [{"row": 2, "selection": ROW2}]
    row2 = await g.admit("run_s", (await g.bind(3, ROW2))["session_id"], kind="standalone")
    await g.settle_from_journal(row2, ACCEPTED)
    gate = await g.gate("run_s")
    assert (gate["qualifying_reviews"], gate["publishable"], gate["remaining_rows"]) == (2, True, [])


async def test_an_explicit_warm_continues_the_lineage_through_the_gateway_and_fills_a_warm_row_one(
    api: Api,
) -> None:
    g = await Gate(api).setup()
    cold = await g.bind(4, ROW1, head=MID)
    done = await api.http.post(
        f"/v1/review-rounds/sessions/{cold['session_id']}/complete",
        json={"reviewed_head": MID, "lease_id": cold["lease_id"]},
        headers=g.reviewer,
    )
    assert done.status_code == 200, done.text
    warm = await g.bind(4, {**ROW1, "mode": "warm"}, review_id=cold["review_id"])
    assert (warm["mode"], warm["fresh_session"], warm["session_id"]) == ("warm", False, cold["session_id"])
    assert warm["range"] == {"base": MID, "head": HEAD} and warm["selection"]["mode"] == "warm"
    # A WARM row 1 continues its own lineage at the gate: the continued session's pipeline review
    # fills it. Its Diff scope table must still cover the whole contribution from the base.
    await g.run("run_w", 4, sequence=[{**ROW1, "mode": "warm"}])
    delta = await g.admit("run_w", warm["session_id"], kind="pipeline")
    await g.settle_from_journal(delta, {**ACCEPTED, "diff_scope": scope(base=MID)})
    gate = await g.gate("run_w")
    assert gate["qualifying_reviews"] == 0 and "whole contribution" in refused(gate)[delta]
    whole = await g.admit("run_w", warm["session_id"], kind="pipeline")
    await g.settle_from_journal(whole, ACCEPTED)
    gate = await g.gate("run_w")
    assert gate["publishable"] and gate["filled_rows"][0]["receipt_id"] == whole


async def test_a_verdict_carries_its_diff_scope_table(api: Api) -> None:
    g = await Gate(api).setup()
    await g.run("run_d", 5)
    session = (await g.bind(5, ROW1))["session_id"]
    bare = await g.admit("run_d", session)
    await g.settle_from_journal(bare, {k: v for k, v in ACCEPTED.items() if k != "diff_scope"})
    malformed = await g.admit("run_d", session)
    receipt = await g.settle_from_journal(malformed, {**ACCEPTED, "diff_scope": {"base": BASE}})
    assert "refused" in receipt["settlement"]["diff_scope"]
    gate = await g.gate("run_d")
    assert "no Diff scope table" in refused(gate)[bare] and "was refused" in refused(gate)[malformed]
    # A reported verdict's table is checked on the way in.
    reported = await g.admit("run_d", session)
    assert_problem(
        await api.http.post(
            f"/v1/review-rounds/admissions/{reported}/settlement",
            json={"verdict": "pass", "reviewed_head": HEAD, "diff_scope": scope(head=OTHER)},
            headers=g.reviewer,
        ),
        422,
        "bad_request",
    )
    table = await g.admit("run_d", session)
    receipt = await g.settle_from_journal(table, ACCEPTED)
    assert receipt["settlement"]["diff_scope"] == scope()
    assert (await g.gate("run_d"))["publishable"]


def _chained(records: list[dict[str, Any]]) -> list[bytes]:
    """A 1.2.0 producer's lines: canonical JSON, each hashed over itself without ``hash``."""
    import hashlib

    lines, prev = [], "0" * 64
    for record in records:
        body = {**record, "prev_hash": prev}
        canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        body["hash"] = prev = hashlib.sha256(canonical).hexdigest()
        lines.append(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))
    return lines


async def test_a_journal_reads_back_as_the_json_lines_it_was_written_as_paged(api: Api) -> None:
    g = await Gate(api).setup()
    envelope = {"v": 0, "session_id": "s", "turn_id": "t1", "ts": 1, "family": "loop", "tier": "durable"}
    legacy = {
        **envelope,
        "id": 1,
        "type": "turn_completed",
        "payload": {"final": True},
        "schema_version": "1.0.0",
    }
    future = {
        **envelope,
        "id": 2,
        "type": "approval_requested",
        "payload": {"x": "é"},
        "schema_version": "1.1.0",
    }
    chain = _chained(
        [
            {
                **envelope,
                "id": 3,
                "type": "turn_started",
                "payload": {"prompt": "p"},
                "schema_version": "1.2.0",
            },
            {
                **envelope,
                "id": 4,
                "type": "item_completed",
                "payload": {"item_id": "i1"},
                "schema_version": "1.2.0",
            },
        ]
    )
    body = b"\n".join([orjson.dumps(legacy), orjson.dumps(future), *chain]) + b"\n"
    appended = await api.http.post(
        "/v1/journals/run_j/events",
        content=body,
        headers={**g.reviewer, "Content-Type": "application/x-ndjson"},
    )
    assert appended.status_code == 201, appended.text
    page = await api.http.get("/v1/journals/run_j/events", params={"limit": 3}, headers=g.reviewer)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("application/x-ndjson")
    assert page.headers["x-next-after"] == "3"
    lines = page.content.splitlines(keepends=True)
    # Byte for byte as appended: the producer's key order (not sorted), its text, its chain.
    assert lines[:2] == [orjson.dumps(legacy) + b"\n", orjson.dumps(future) + b"\n"]
    assert lines[2] == chain[0] + b"\n" and "x-reencoded" not in page.headers
    # A bare event the service composes into the envelope is the service's canonical line, and says so.
    bare = {"type": "turn_completed", "session_id": "s", "turn_id": "t2", "payload": {"final": False}}
    composed = await api.http.post("/v1/journals/run_j/events", json={"events": [bare]}, headers=g.reviewer)
    assert composed.status_code == 201, composed.text
    rest = await api.http.get("/v1/journals/run_j/events", params={"after": 3}, headers=g.reviewer)
    assert (
        rest.content.splitlines(keepends=True)[0] == chain[1] + b"\n" and "x-next-after" not in rest.headers
    )
    assert rest.headers["x-reencoded"] == "5"
    fifth = orjson.loads(rest.content.splitlines()[1])
    assert rest.content.splitlines()[1] == orjson.dumps(fifth, option=orjson.OPT_SORT_KEYS)
    as_json = await api.http.get(
        "/v1/journals/run_j/events",
        params={"limit": 1},
        headers={**g.reviewer, "Accept": "application/json"},
    )
    assert as_json.json() == {"events": [legacy], "next_after": 1, "reencoded": []}
    last = await api.http.get(
        "/v1/journals/run_j/events", params={"after": 4}, headers={**g.reviewer, "Accept": "application/json"}
    )
    assert last.json() == {"events": [fifth], "next_after": None, "reencoded": [5]}
    # Another tenant reads an empty journal.
    stranger = await api.agent()
    assert (await api.http.get("/v1/journals/run_j/events", headers=stranger)).content == b""
