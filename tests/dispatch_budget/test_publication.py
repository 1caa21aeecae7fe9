"""The publication side of spec 003 (issue 14): the ready-gate payload (the round budget's display
snapshot N/L with the no-verdict count, the extension's scope and provenance, qualifying reviews vs
required), and the CLI's ``run create``; through the real gateway on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from tests.conftest import Api
from tests.e2e.test_bad_input import assert_problem

OLD, HEAD = "a" * 40, "b" * 40
RUNNER = {
    "name": "codex",
    "models": ["gpt-5", "gpt-5-mini"],
    "efforts": ["high", "low"],
    "default_model": "gpt-5",
    "default_effort": "high",
}


async def _project(api: Api) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    project = await api.project()
    pid = project["project_id"]
    reviewer = api.auth((await api.key(pid, "review_agent"))["api_key"])
    admin = api.auth((await api.key(pid, "admin"))["api_key"])
    agent = api.auth((await api.key(pid, "agent"))["api_key"])
    assert (await api.http.post("/v1/review-rounds/runners", json=RUNNER, headers=admin)).status_code == 201
    return reviewer, admin, agent


BASE = "f" * 40
# The reviewer sessions the tests name, bound on first use with the selection each ran.
SELECTIONS = {"rvs_4": {"runner": "codex", "model": "gpt-5-mini", "effort": "low", "mode": "cold"}}
COLD = {"runner": "codex", "mode": "cold"}


async def _session(api: Api, reviewer: dict[str, str], name: str, head: str, bound: dict[str, str]) -> str:
    if name not in bound:
        response = await api.http.post(
            "/v1/review-rounds/sessions",
            json={
                "repository": "acme/web",
                "pr_number": 4,
                "base_sha": BASE,
                "head_sha": head,
                "selection": SELECTIONS.get(name, COLD),
            },
            headers=reviewer,
        )
        assert response.status_code == 201, response.text
        bound[name] = response.json()["session_id"]
    return bound[name]


async def _review(
    api: Api,
    reviewer: dict[str, str],
    key: str,
    head: str,
    verdict: str | None,
    session: str = "",
    bound: dict[str, str] | None = None,
) -> None:
    """An attempt as a reviewer runs it: in a bound session, settled from its attempt journal, whose
    closing record stamps accepted evidence, the verdict, the reviewed head and the Diff scope table."""
    session_id = (
        await _session(api, reviewer, session, head, bound if bound is not None else {}) if session else ""
    )
    admitted = await api.http.post(
        "/v1/review-rounds/admissions",
        json={
            "run_id": "run_p",
            "attempt_key": key,
            "kind": "initial",
            "trigger": "operator_request",
            "head_sha": head,
            "review_session_id": session_id,
        },
        headers=reviewer,
    )
    assert admitted.status_code == 201, admitted.text
    receipt_id = admitted.json()["receipt"]["receipt_id"]
    outcome: dict[str, Any] = {"no_verdict_reason": "exited"}
    if verdict:
        final = {
            "final": True,
            "evidence": "accepted",
            "refs": [1],
            "verdict": verdict,
            "reviewed_head": head,
            "diff_scope": {"base": BASE, "head": head, "rows": []},
        }
        event = {"type": "turn_completed", "session_id": session_id, "turn_id": "t", "payload": final}
        journal = await api.http.post(
            f"/v1/journals/j-{key}/events", json={"events": [event]}, headers=reviewer
        )
        assert journal.status_code == 201, journal.text
        outcome = {"journal_run_id": f"j-{key}"}
    settled = await api.http.post(
        f"/v1/review-rounds/admissions/{receipt_id}/settlement", json=outcome, headers=reviewer
    )
    assert settled.status_code == 200, settled.text


async def _gate(api: Api, headers: dict[str, str]) -> Any:
    response = await api.http.get("/v1/review-rounds/ready-gate", params={"run_id": "run_p"}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def test_spending_all_five_rounds_never_blocks_publication_and_an_extension_makes_nothing_stale_pass(
    api: Api,
) -> None:
    reviewer, admin, agent = await _project(api)
    sequence = [
        {"runner": "codex", "mode": "cold"},
        {"runner": "codex", "model": "gpt-5-mini", "effort": "low", "mode": "cold"},
    ]
    run = await api.http.put(
        "/v1/review-rounds/runs/run_p",
        json={"repository": "acme/web", "pr_number": 4, "head_sha": OLD, "review_sequence": sequence},
        headers=admin,
    )
    assert run.status_code == 200, run.text
    assert [r["model"] for r in run.json()["review_sequence"]] == ["gpt-5", "gpt-5-mini"]
    bound: dict[str, str] = {}
    # Passing reviews of the old head, a no-verdict end, then the head moves on.
    await _review(api, reviewer, "k1", OLD, "pass", "rvs_1", bound)
    await _review(api, reviewer, "k2", OLD, "pass", "rvs_2", bound)
    await _review(api, reviewer, "k3", OLD, None)
    await api.http.put("/v1/review-rounds/runs/run_p", json={"head_sha": HEAD}, headers=reviewer)
    gate = await _gate(api, agent)
    assert (gate["qualifying_reviews"], gate["required_reviews"], gate["publishable"]) == (0, 2, False)
    assert "0 of 2" in gate["blockers"][0] and gate["head_sha"] == HEAD  # stale reviews do not qualify
    # An admin grant adds rounds; it makes no stale review or old package publishable.
    await _review(api, reviewer, "k4", HEAD, "issues", "rvs_3", bound)
    await _review(api, reviewer, "k5", HEAD, "pass", "rvs_3", bound)  # the same session again: one review
    await _review(api, reviewer, "k6", HEAD, "pass", "rvs_3", bound)
    budget = (await _gate(api, agent))["review_round_budget"]
    assert (budget["label"], budget["exhausted"], budget["no_verdict"]) == ("5/5 (no-verdict 1/3)", True, 1)
    granted = await api.http.post(
        "/v1/runs/run_p/extend-review-budget",
        json={"head_sha": HEAD, "limit": 6, "expected_limit": 5, "scope_brief": "second reviewer only"},
        headers={**admin, "Idempotency-Key": "g-p"},
    )
    assert granted.status_code == 201, granted.text
    gate = await _gate(api, agent)
    assert (gate["qualifying_reviews"], gate["publishable"]) == (1, False)
    extension = gate["review_round_budget"]["extension"]
    assert extension["scope_brief"] == "second reviewer only" and extension["origin"]["actor_kind"] == "admin"
    assert gate["review_round_budget"]["label"].startswith("5/6")
    # The second qualifying review in a separate session: publishable although every round is spent.
    await _review(api, reviewer, "k7", HEAD, "pass", "rvs_4", bound)
    gate = await _gate(api, agent)
    assert gate["review_round_budget"]["exhausted"] and gate["review_round_budget"]["label"].startswith("6/6")
    assert (gate["qualifying_reviews"], gate["required_reviews"], gate["publishable"], gate["blockers"]) == (
        2,
        2,
        True,
        [],
    )
    # Publishing closes it; an archived or published run is not publishable again.
    assert (
        await api.http.put("/v1/review-rounds/runs/run_p", json={"status": "published"}, headers=admin)
    ).status_code == 200
    assert not (await _gate(api, agent))["publishable"]


async def test_without_a_sequence_the_project_configuration_sets_the_required_count(api: Api) -> None:
    reviewer, admin, agent = await _project(api)
    await api.http.put("/v1/review-rounds/runs/run_p", json={"head_sha": HEAD}, headers=reviewer)
    assert (await _gate(api, agent))["required_reviews"] == 1
    config = {"review": {"sequence": [{"runner": "codex", "mode": "cold"}] * 3}}
    assert (await api.http.put("/v1/review-rounds/config", json=config, headers=admin)).status_code == 200
    assert (await _gate(api, agent))["required_reviews"] == 3
    assert_problem(
        await api.http.get("/v1/review-rounds/ready-gate", params={"run_id": "nope"}, headers=agent),
        404,
        "not_found",
    )


async def test_run_create_records_the_selection_through_the_gateway(
    api: Api, monkeypatch: Any, capsys: Any
) -> None:
    from stack.cli import main

    _, admin, agent = await _project(api)
    monkeypatch.setenv("REVIEWLOOP_API_KEY", admin["Authorization"].removeprefix("Bearer "))
    gateway = ["--gateway", f"http://{api.stack.address('gateway')}"]
    flags = ["--runner", "codex", "--model", "gpt-5-mini", "--effort", "low", "--review-mode", "warm"]
    argv = [
        "run",
        "create",
        "run_c",
        "--repository",
        "acme/web",
        "--pr",
        "9",
        "--head",
        HEAD,
        *flags,
        *gateway,
    ]
    assert await asyncio.to_thread(main, argv) == 0
    created = orjson.loads(capsys.readouterr().out)
    assert created["review_mode"] == "warm" and created["review_sequence"] == [
        {"runner": "codex", "model": "gpt-5-mini", "effort": "low", "mode": "warm"}
    ]
    sequence = orjson.dumps(
        [{"runner": "codex", "mode": "cold"}, {"runner": "codex", "mode": "warm"}]
    ).decode()
    assert (
        await asyncio.to_thread(main, ["run", "create", "run_d", "--review-sequence", sequence, *gateway])
        == 0
    )
    assert [r["mode"] for r in orjson.loads(capsys.readouterr().out)["review_sequence"]] == ["cold", "warm"]
    # A runner outside the catalog is refused with the row named; nothing is recorded.
    bad = orjson.dumps([{"runner": "nope", "mode": "cold"}]).decode()
    assert await asyncio.to_thread(main, ["run", "create", "run_e", "--review-sequence", bad, *gateway]) == 2
    assert "/sequence/0/runner" in capsys.readouterr().err
    missing = await api.http.get("/v1/review-rounds/budget", params={"run_id": "run_e"}, headers=agent)
    assert missing.status_code == 404
