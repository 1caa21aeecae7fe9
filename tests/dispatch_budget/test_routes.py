"""The dispatch_budget JSON routes through the real gateway and service processes, both backends."""

from __future__ import annotations

from typing import Any

import orjson
from reviewloop.budget.v1 import budget_pb2, budget_pb2_grpc
from reviewloop.service import Peers

from tests.conftest import Api
from tests.e2e.test_bad_input import assert_problem

HEAD = "e" * 40


async def _keys(api: Api) -> tuple[dict[str, str], dict[str, str], str]:
    project = await api.project()
    reviewer = api.auth((await api.key(project["project_id"], "review_agent"))["api_key"])
    admin = api.auth((await api.key(project["project_id"], "admin"))["api_key"])
    return reviewer, admin, project["project_id"]


async def _admit(api: Api, headers: dict[str, str], key: str, trigger: str = "operator_request") -> Any:
    return await api.http.post(
        "/v1/review-rounds/admissions",
        json={
            "run_id": "run_1",
            "attempt_key": key,
            "kind": "initial",
            "trigger": trigger,
            "head_sha": HEAD,
            "selection": {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "cold"},
        },
        headers=headers,
    )


async def test_a_budget_runs_out_at_five_and_an_admin_grant_extends_it(api: Api) -> None:
    reviewer, admin, _ = await _keys(api)
    run = await api.http.put(
        "/v1/review-rounds/runs/run_1",
        json={"repository": "acme/api", "pr_number": 3, "head_sha": HEAD},
        headers=reviewer,
    )
    assert run.status_code == 200, run.text
    created = run.json()
    assert created.pop("created_by").startswith("review_agent:")  # its owner: the reviewer key
    assert created == {
        "run_id": "run_1",
        "status": "active",
        "scope_key": "pr:acme/api#3",
        "repository": "acme/api",
        "pr_number": 3,
        "head_sha": HEAD,
    }
    for i in range(5):
        response = await _admit(api, reviewer, f"k{i}")
        assert response.status_code == 201, response.text
    body = response.json()
    assert body["receipt"]["round"] == 5 and body["receipt"]["selection"]["mode"] == "cold"
    assert body["review_round_budget"]["label"] == "5/5" and "settlement" not in body["receipt"]
    refused = assert_problem(await _admit(api, reviewer, "k5"), 403, "quota_exceeded")
    assert "5/5" in str(refused["detail"]) and "Stop and diagnose" in str(refused["detail"])

    grant = {
        "head_sha": HEAD,
        "limit": 6,
        "expected_limit": 5,
        "scope_brief": "retry flake fix only",
        "approved_by": "the CEO",
    }
    assert_problem(
        await api.http.post(
            "/v1/runs/run_1/extend-review-budget", json=grant, headers={**reviewer, "Idempotency-Key": "g1"}
        ),
        403,
        "forbidden_scope",
    )
    assert_problem(
        await api.http.post(
            "/v1/runs/run_1/extend-review-budget", json=grant, headers={**api.admin, "Idempotency-Key": "g1"}
        ),
        403,
        "forbidden_scope",
    )
    for bad in ({**grant, "limit": 6.0}, {**grant, "limit": "6"}, {**grant, "limit": 6.5}):
        assert_problem(
            await api.http.post(
                "/v1/runs/run_1/extend-review-budget", json=bad, headers={**admin, "Idempotency-Key": "g1"}
            ),
            422,
            "bad_request",
        )
    assert_problem(
        await api.http.post("/v1/runs/run_1/extend-review-budget", json=grant, headers=admin),
        422,
        "bad_request",
    )  # no key
    response = await api.http.post(
        "/v1/runs/run_1/extend-review-budget", json=grant, headers={**admin, "Idempotency-Key": "g1"}
    )
    assert response.status_code == 201, response.text
    receipt = response.json()
    assert receipt["origin"]["actor_kind"] == "admin" and "CEO" not in orjson.dumps(receipt).decode()
    assert (receipt["prior_limit"], receipt["new_limit"], receipt["approved_head"], receipt["pr_number"]) == (
        5,
        6,
        HEAD,
        3,
    )
    retry = await api.http.post(
        "/v1/runs/run_1/extend-review-budget", json=grant, headers={**admin, "Idempotency-Key": "g1"}
    )
    assert retry.json() == receipt
    assert_problem(
        await api.http.post(
            "/v1/runs/run_1/extend-review-budget",
            json={**grant, "scope_brief": "all"},
            headers={**admin, "Idempotency-Key": "g1"},
        ),
        409,
        "idempotency_conflict",
    )
    assert (await _admit(api, reviewer, "k5")).status_code == 201
    budget = (
        await api.http.get("/v1/review-rounds/budget", params={"run_id": "run_1"}, headers=reviewer)
    ).json()
    assert budget["label"] == "6/6" and budget["extension"]["receipt_id"] == receipt["receipt_id"]


async def test_a_no_verdict_settlement_shows_on_the_label(api: Api) -> None:
    reviewer, _, _ = await _keys(api)
    await api.http.put("/v1/review-rounds/runs/run_1", json={"head_sha": HEAD}, headers=reviewer)
    receipt = (await _admit(api, reviewer, "k1")).json()["receipt"]
    response = await api.http.post(
        f"/v1/review-rounds/admissions/{receipt['receipt_id']}/settlement",
        json={"no_verdict_reason": "timed_out"},
        headers=reviewer,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (
        body["receipt"]["settlement"]["outcome"] == "no_verdict"
        and body["receipt"]["settlement"]["reason"] == "timed_out"
    )
    assert body["review_round_budget"]["label"] == "0/5 (no-verdict 1/3)"
    bad = await api.http.post(
        f"/v1/review-rounds/admissions/{receipt['receipt_id']}/settlement",
        json={"no_verdict_reason": "bored"},
        headers=reviewer,
    )
    assert assert_problem(bad, 422, "bad_request")["errors"][0]["field"] == "/no_verdict_reason"  # type: ignore[index]


async def test_a_publication_plan_stopped_at_the_no_verdict_cap_is_recorded(api: Api) -> None:
    reviewer, _, _ = await _keys(api)
    await api.http.put("/v1/review-rounds/runs/run_1", json={"head_sha": HEAD}, headers=reviewer)
    for n in range(3):
        receipt = (await _admit(api, reviewer, f"k{n}")).json()["receipt"]
        await api.http.post(
            f"/v1/review-rounds/admissions/{receipt['receipt_id']}/settlement",
            json={"no_verdict_reason": "launch_failed"},
            headers=reviewer,
        )
    stopped = await _admit(api, reviewer, "plan-1", trigger="publication_plan")
    problem = assert_problem(stopped, 403, "quota_exceeded")
    budget = (
        await api.http.get("/v1/review-rounds/budget", params={"run_id": "run_1"}, headers=reviewer)
    ).json()
    refusal = budget["last_launch_refusal"]
    assert (refusal["attempt_key"], refusal["trigger"], refusal["no_verdict"]) == (
        "plan-1",
        "publication_plan",
        3,
    )
    assert refusal["reason"] == problem["detail"] and refusal["refused_at"].endswith("Z")


async def test_journal_lines_are_appended_and_decoded(api: Api) -> None:
    reviewer, _, _ = await _keys(api)
    lines = [
        {"type": "turn_started", "session_id": "s", "turn_id": "t1", "payload": {"prompt": "p"}},
        {
            "type": "item_delta",
            "session_id": "s",
            "turn_id": "t1",
            "payload": {"item_id": "i1", "chunk": "x"},
        },
        {
            "type": "turn_completed",
            "session_id": "s",
            "turn_id": "t1",
            "payload": {"final": True, "refs": [1]},
        },
    ]
    body = b"\n".join(orjson.dumps(line) for line in lines) + b"\n"
    response = await api.http.post(
        "/v1/journals/att_1/events",
        content=body,
        headers={**reviewer, "content-type": "application/x-ndjson"},
    )
    assert response.status_code == 201, response.text
    assert response.json() == {
        "appended": 2,
        "skipped_ephemeral": 1,
        "last_offset": 2,
        "already_journaled": 0,
    }
    evidence = (await api.http.get("/v1/journals/att_1/evidence", headers=reviewer)).json()
    assert evidence == {"run_id": "att_1", "evidence": "accepted", "offset": 2, "schema_version": "1.1.0"}
    bad = await api.http.post("/v1/journals/att_1/events", json={"events": [{"type": ""}]}, headers=reviewer)
    assert assert_problem(bad, 422, "bad_request")["errors"][0]["field"] == "/events/0/type"  # type: ignore[index]


async def test_consume_auto_send_over_grpc_holds_over_the_cap(api: Api) -> None:
    from reviewloop.tenancy import ActorKind, Principal

    peers = Peers({"dispatch_budget": api.stack.address("dispatch_budget")})
    try:
        stub = budget_pb2_grpc.DispatchBudgetServiceStub(peers.channel("dispatch_budget"))
        principal = Principal("org_x", "prj_x", ActorKind.SYSTEM, "review_state").to_proto()
        replies = [
            await stub.ConsumeAutoSend(
                budget_pb2.ConsumeAutoSendRequest(
                    principal=principal, category_id="cat_1", review_id=f"rr_{i}", cap_per_day=2
                )
            )
            for i in (1, 2, 3, 1)
        ]
        assert [(r.allowed, r.used_today) for r in replies] == [(True, 1), (True, 2), (False, 2), (True, 2)]
    finally:
        await peers.close()


async def test_runners_sequences_mode_and_lineage_through_the_gateway(api: Api) -> None:
    reviewer, admin, _ = await _keys(api)
    runner = {
        "name": "codex",
        "models": ["gpt-5"],
        "efforts": ["medium", "high"],
        "default_model": "gpt-5",
        "default_effort": "medium",
    }
    assert_problem(
        await api.http.post("/v1/review-rounds/runners", json=runner, headers=reviewer),
        403,
        "forbidden_scope",
    )
    assert (await api.http.post("/v1/review-rounds/runners", json=runner, headers=admin)).status_code == 201
    listed = (await api.http.get("/v1/review-rounds/runners", headers=reviewer)).json()
    assert [r["name"] for r in listed["runners"]] == ["codex"]

    sequence = [{"runner": "codex", "mode": "cold"}, {"runner": "codex", "effort": "high", "mode": "warm"}]
    response = await api.http.post(
        "/v1/review-rounds/sequences/validate", json={"sequence": sequence}, headers=reviewer
    )
    assert response.status_code == 200, response.text
    assert response.json()["request_review"] == {
        "action": "request-review",
        "runner": "codex",
        "model": "gpt-5",
        "effort": "medium",
        "mode": "cold",
        "sequence": [{"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "warm"}],
    }
    bad = await api.http.post(
        "/v1/review-rounds/sequences/validate",
        json={"sequence": [{"runner": "same", "mode": "cold"}]},
        headers=reviewer,
    )
    assert assert_problem(bad, 422, "bad_request")["errors"][0]["field"] == "/sequence/0/runner"  # type: ignore[index]

    mode = await api.http.post(
        "/v1/review-rounds/mode",
        json={"explicit": "cold", "project_config": {"review": {"mode": "warm"}}},
        headers=reviewer,
    )
    assert mode.json() == {"mode": "cold", "source": "explicit"}
    removed = await api.http.post(
        "/v1/review-rounds/mode",
        json={"project_config": {"review": {"require_cross_runner": True}}},
        headers=reviewer,
    )
    assert "removed" in str(assert_problem(removed, 422, "bad_request")["detail"])
    stored = await api.http.put(
        "/v1/review-rounds/runs/run_modes", json={"pr_work_review_mode": "warm"}, headers=reviewer
    )
    assert stored.json()["pr_work_review_mode"] == "warm" and "review_mode" not in stored.json()
    from_run = await api.http.post("/v1/review-rounds/mode", json={"run_id": "run_modes"}, headers=reviewer)
    assert from_run.json() == {"mode": "warm", "source": "pr_work"}
    assert (await api.http.get("/v1/review-rounds/config", headers=reviewer)).json() == {"config": {}}
    refused = await api.http.put(
        "/v1/review-rounds/config", json={"review": {"mode": "warm"}}, headers=reviewer
    )
    assert_problem(refused, 403, "forbidden_scope")
    stored = await api.http.put("/v1/review-rounds/config", json={"review": {"mode": "warm"}}, headers=admin)
    assert stored.json() == {"config": {"review": {"mode": "warm"}}, "mode": "warm"}
    defaulted = await api.http.post("/v1/review-rounds/mode", json={}, headers=reviewer)
    assert defaulted.json() == {"mode": "warm", "source": "project"}

    base, head, later = "1" * 40, "2" * 40, "3" * 40
    bind = {
        "repository": "acme/api",
        "pr_number": 4,
        "base_sha": base,
        "head_sha": head,
        "selection": {"runner": "codex", "mode": "cold"},
    }
    cold_response = await api.http.post("/v1/review-rounds/sessions", json=bind, headers=reviewer)
    assert cold_response.status_code == 201, cold_response.text
    cold = cold_response.json()
    assert cold["fresh_session"] and cold["range"] == {"base": base, "head": head}
    warm = {
        **bind,
        "head_sha": later,
        "selection": {"runner": "codex", "mode": "warm"},
        "review_id": cold["review_id"],
    }
    busy = await api.http.post("/v1/review-rounds/sessions", json=warm, headers=reviewer)
    assert "busy" in str(assert_problem(busy, 409, "wrong_state")["detail"])
    done = await api.http.post(
        f"/v1/review-rounds/sessions/{cold['session_id']}/complete",
        json={"reviewed_head": head},
        headers=reviewer,
    )
    assert done.status_code == 200 and not done.json()["busy"]
    continued = (await api.http.post("/v1/review-rounds/sessions", json=warm, headers=reviewer)).json()
    assert continued["session_id"] == cold["session_id"] and continued["range"] == {
        "base": head,
        "head": later,
    }


async def test_session_turns_gate_decisions_and_their_json_lines(api: Api) -> None:
    agent = await api.agent()
    turn = {"status": "completed", "tool_calls": 16, "digest": {"last_human_message": "hi"}}
    response = await api.http.post("/v1/sessions/s-1/turns", json=turn, headers=agent)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["decision"]["decision"] == "review" and body["decision"]["tool_calls"] == 16
    assert body["counters"]["in_flight"] and body["counters"]["reviews"] == 1
    again = (await api.http.post("/v1/sessions/s-1/turns", json=turn, headers=agent)).json()
    assert again["not_due_reason"] == "in_flight" and "decision" not in again
    sub = (
        await api.http.post("/v1/sessions/s-2/turns", json={**turn, "origin": "subagent"}, headers=agent)
    ).json()
    assert not sub["counted"] and sub["not_due_reason"] == "not_counted"
    finished = (
        await api.http.post("/v1/sessions/s-1/review/finish", json={"succeeded": True}, headers=agent)
    ).json()
    assert finished["counters"]["tools"] == 0 and not finished["counters"]["in_flight"]
    now = (await api.http.post("/v1/sessions/s-1/review", json={"now": True}, headers=agent)).json()
    assert now["decision"]["reason"] == "review now"  # bypasses the 20-minute cooldown
    listed = (await api.http.get("/v1/gate-decisions", headers=agent)).json()
    assert [d["session"] for d in listed["decisions"]] == ["s-1", "s-1"] and listed["next_cursor"] is None
    lines = await api.http.get("/v1/gate-decisions", headers={**agent, "Accept": "application/x-ndjson"})
    assert lines.headers["content-type"].startswith("application/x-ndjson")
    records = [orjson.loads(line) for line in lines.text.splitlines()]
    assert records[0]["toolCalls"] == 16 and "latencyMs" in records[0] and records[0]["threshold"] == 0.75
    other = await api.agent()
    assert (await api.http.get("/v1/gate-decisions", headers=other)).json()["decisions"] == []


async def test_the_extend_budget_command_grants_through_the_gateway(api: Api, monkeypatch: Any) -> None:
    import asyncio

    from stack.cli import main

    reviewer, admin, _ = await _keys(api)
    await api.http.put("/v1/review-rounds/runs/run_1", json={"head_sha": HEAD}, headers=reviewer)
    monkeypatch.setenv("REVIEWLOOP_API_KEY", admin["Authorization"].removeprefix("Bearer "))
    argv = [
        "review",
        "extend-budget",
        "run_1",
        "--head",
        HEAD,
        "--limit",
        "8",
        "--scope-brief",
        "flaky test only",
        "--request-id",
        "cli-1",
        "--gateway",
        f"http://{api.stack.address('gateway')}",
    ]
    assert await asyncio.to_thread(main, argv) == 0
    assert await asyncio.to_thread(main, argv) == 0  # an exact retry answers the same receipt
    stale = [*argv[:-4], "--request-id", "cli-2", "--expected-limit", "5", *argv[-2:]]
    assert await asyncio.to_thread(main, stale) == 2  # the compare-and-set sees 8, not 5
    budget = (
        await api.http.get("/v1/review-rounds/budget", params={"run_id": "run_1"}, headers=reviewer)
    ).json()
    assert budget["label"] == "0/8" and budget["extension"]["scope_brief"] == "flaky test only"


async def test_review_on_off_and_review_now_answer_the_counters_and_why_nothing_was_decided(api: Api) -> None:
    agent = await api.agent()
    idle = {"turns": 0, "tools": 0, "turn_index": 0, "reviews": 0, "in_flight": False, "enabled": False}
    off = await api.http.put("/v1/sessions/s-9/review-enabled", json={"enabled": False}, headers=agent)
    assert off.status_code == 200, off.text
    assert off.json() == {"counters": idle, "counted": False}
    asked = (await api.http.post("/v1/sessions/s-9/review", json={}, headers=agent)).json()
    assert asked == {"counters": idle, "counted": False, "not_due_reason": "disabled"}
    now = (await api.http.post("/v1/sessions/s-9/review", json={"now": True}, headers=agent)).json()
    assert list(now) == ["counters", "counted", "decision"] and now["counted"] is True
    assert (now["decision"]["decision"], now["decision"]["reason"]) == ("review", "review now")
    running = {**idle, "reviews": 1, "in_flight": True}
    assert now["counters"] == running
    again = (await api.http.post("/v1/sessions/s-9/review", json={"now": True}, headers=agent)).json()
    assert again == {"counters": running, "counted": False, "not_due_reason": "in_flight"}
    on = (await api.http.put("/v1/sessions/s-9/review-enabled", json={"enabled": True}, headers=agent)).json()
    assert on == {"counters": {**running, "enabled": True}, "counted": False}
