"""Nothing blocks forever after a crash (issue 14): spec 001's timeoutMinutes ends a review in flight
(settling its admitted attempt no-verdict), a busy WARM binding is a lease a crashed reviewer loses,
``confidentNo = 1`` only observes, and the gate configuration is per project, set by an admin. Both
backends; through the gateway where a user sees it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from dispatch_budget.domain.gate import decision_from_answer
from reviewloop.errors import Code, DomainError
from reviewloop.tenancy import ActorKind, Principal

from tests.conftest import Api
from tests.dispatch_budget.test_selection import BASE, H1, H2, OpenDb, _bind, _catalog
from tests.e2e.test_bad_input import assert_problem

REVIEWER = Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_rev")
HEAD = "d" * 40
WARM = {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "warm"}


async def _project(api: Api) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    project = await api.project()
    pid = project["project_id"]
    agent = api.auth((await api.key(pid, "agent"))["api_key"])
    reviewer = api.auth((await api.key(pid, "review_agent"))["api_key"])
    admin = api.auth((await api.key(pid, "admin"))["api_key"])
    return agent, reviewer, admin


async def _turn(api: Api, headers: dict[str, str]) -> Any:
    response = await api.http.post("/v1/sessions/s1/turns", json={"status": "completed"}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_review_in_flight_past_timeout_minutes_ends_and_the_next_due_review_runs(api: Api) -> None:
    agent, reviewer, admin = await _project(api)
    config = {"turn_interval": 1, "cooldown_minutes": 0}
    put = await api.http.put("/v1/review-rounds/gate-config", json=config, headers=admin)
    assert put.status_code == 200, put.text
    assert put.json()["effective"]["timeout_minutes"] == 5  # the deployment default
    first = await _turn(api, agent)
    assert first["decision"]["decision"] == "review" and first["counters"]["in_flight"]
    # The reviewer admits the review, naming the session whose review it is.
    await api.http.put("/v1/review-rounds/runs/s1-run", json={"head_sha": HEAD}, headers=reviewer)
    admitted = await api.http.post(
        "/v1/review-rounds/admissions",
        json={
            "run_id": "s1-run",
            "attempt_key": "s1:1",
            "kind": "initial",
            "trigger": "operator_request",
            "session_id": "s1",
        },
        headers=reviewer,
    )
    assert admitted.status_code == 201, admitted.text
    # Within timeoutMinutes the single in-flight rule holds.
    assert (await _turn(api, agent))["not_due_reason"] == "in_flight"
    # Past it (an admin sets 0 minutes: every review in flight is overdue) the review ends as timed
    # out and the session's next due review runs.
    put = await api.http.put(
        "/v1/review-rounds/gate-config", json={**config, "timeout_minutes": 0}, headers=admin
    )
    assert put.json()["overrides"]["timeout_minutes"] == 0
    second = await _turn(api, agent)
    assert second.get("not_due_reason") is None and second["decision"]["decision"] == "review", second
    # Back to 5 minutes at once: at 0 the new review is overdue too, and the timeout sweep (every 30 s, in
    # every replica) could end it before the late finish below (seen once on PostgreSQL under load).
    put = await api.http.put(
        "/v1/review-rounds/gate-config", json={**config, "timeout_minutes": 5}, headers=admin
    )
    assert put.status_code == 200, put.text
    # Its admitted attempt settled no-verdict timed_out: no round spent.
    budget = await api.http.get("/v1/review-rounds/budget", params={"run_id": "s1-run"}, headers=agent)
    assert (budget.json()["used"], budget.json()["no_verdict"]) == (0, 1), budget.text
    # The timed-out reviewer's late finish (naming its receipt) leaves the new review in flight.
    late = await api.http.post(
        "/v1/sessions/s1/review/finish",
        json={"succeeded": True, "receipt_id": admitted.json()["receipt"]["receipt_id"]},
        headers=agent,
    )
    assert late.status_code == 200 and late.json()["counters"]["in_flight"], late.text


async def test_gate_configuration_is_per_project_and_admin_only(api: Api) -> None:
    agent, reviewer, admin = await _project(api)
    other_agent, _, _ = await _project(api)
    for key in (agent, reviewer):
        assert_problem(
            await api.http.put("/v1/review-rounds/gate-config", json={"enabled": False}, headers=key),
            403,
            "forbidden_scope",
        )
    set_ = await api.http.put(
        "/v1/review-rounds/gate-config",
        json={
            "enabled": False,
            "gate": "classifier",
            "confident_no": 0.9,
            "gate_cooldown_minutes": 2,
        },
        headers=admin,
    )
    assert set_.status_code == 200, set_.text
    effective = set_.json()["effective"]
    assert (effective["enabled"], effective["confident_no"], effective["classifier_endpoints"]) == (
        False,
        0.9,
        [],  # this deployment lists no classifier endpoint
    )
    assert "api_key" not in effective
    assert (await _turn(api, agent))["not_due_reason"] == "disabled"
    # Another project keeps the environment's defaults.
    theirs = await api.http.get("/v1/review-rounds/gate-config", headers=other_agent)
    assert theirs.json()["overrides"] == {} and theirs.json()["effective"]["enabled"] is True
    assert_problem(
        await api.http.put("/v1/review-rounds/gate-config", json={"confident_no": 2}, headers=admin),
        422,
        "bad_request",
    )


def test_confident_no_of_one_observes_and_never_cancels() -> None:
    certain_no = {"choice": "no", "confidence": 1.0}
    observed = decision_from_answer(certain_no, 1.0)
    assert observed is not None and observed.decision == "review" and observed.choice == "no"
    skipped = decision_from_answer(certain_no, 0.75)
    assert skipped is not None and skipped.decision == "skip"


async def test_a_crashed_reviewers_lease_expires_and_the_lineage_is_available_again(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _catalog(db)
    cold = await _bind(db, {**WARM, "mode": "cold"}, H1)
    await app.complete_review_session(db, REVIEWER, cold.session_id, H1)
    # A live lease: the binding is busy, and a second WARM review waits (visibly, never COLD).
    held = await _bind(db, WARM, H2, review_id=cold.review_id)
    assert held.busy and held.lease_id and held.lease_expires_at is not None
    try:
        await _bind(db, WARM, H2, review_id=cold.review_id)
        raise AssertionError("a held lease must refuse")
    except DomainError as error:
        assert error.code is Code.WRONG_STATE and "busy" in error.detail and "lease" in error.detail
    renewed = await app.heartbeat_review_session(db, REVIEWER, held.session_id, held.lease_id)
    assert renewed.lease_expires_at is not None and renewed.lease_expires_at >= held.lease_expires_at
    # The reviewer's last heartbeat, then it crashes: nobody renews, and the lease lapses (a 0 s lease
    # has lapsed at once).
    await app.heartbeat_review_session(db, REVIEWER, held.session_id, held.lease_id, timedelta(0))
    taken = await _bind(db, WARM, H2, review_id=cold.review_id)
    # The lineage is available again: the same session (WARM lineage kept), never a COLD one.
    assert not taken.fresh_session and taken.session_id == cold.session_id
    assert (taken.range_base, taken.range_head) == (H1, H2) and taken.lease_id != held.lease_id
    # The crashed reviewer, should it wake, can neither renew nor complete the review that took over.
    try:
        await app.heartbeat_review_session(db, REVIEWER, taken.session_id, held.lease_id)
        raise AssertionError("a taken-over lease must refuse")
    except DomainError as error:
        assert error.code is Code.WRONG_STATE and error.state == "lease_taken_over"
    try:
        await app.complete_review_session(db, REVIEWER, taken.session_id, H2, held.lease_id)
        raise AssertionError("a taken-over lease must not complete")
    except DomainError as error:
        assert error.code is Code.WRONG_STATE
    done = await app.complete_review_session(db, REVIEWER, taken.session_id, H2, taken.lease_id)
    assert not done.busy and done.lease_id == "" and done.range_head == H2


async def test_heartbeat_through_the_gateway(api: Api) -> None:
    _, reviewer, admin = await _project(api)
    runner = {
        "name": "codex",
        "models": ["gpt-5"],
        "efforts": ["high"],
        "default_model": "gpt-5",
        "default_effort": "high",
        "supports_warm": True,
    }
    assert (await api.http.post("/v1/review-rounds/runners", json=runner, headers=admin)).status_code == 201
    bound = await api.http.post(
        "/v1/review-rounds/sessions",
        json={
            "repository": "acme/api",
            "pr_number": 2,
            "selection": {**WARM, "mode": "cold"},
            "base_sha": BASE,
            "head_sha": H1,
        },
        headers=reviewer,
    )
    body = bound.json()
    assert body["busy"] and body["lease_id"] and body["lease_expires_at"], body
    beat = await api.http.post(
        f"/v1/review-rounds/sessions/{body['session_id']}/heartbeat",
        json={"lease_id": body["lease_id"]},
        headers=reviewer,
    )
    assert beat.status_code == 200 and beat.json()["lease_expires_at"] >= body["lease_expires_at"], beat.text
    problem = assert_problem(
        await api.http.post(
            f"/v1/review-rounds/sessions/{body['session_id']}/heartbeat",
            json={"lease_id": "lse_other"},
            headers=reviewer,
        ),
        409,
        "wrong_state",
    )
    assert "taken over" in str(problem["detail"])


async def test_concurrent_takeovers_of_a_lapsed_lease_bind_once(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _catalog(db)
    cold = await _bind(db, {**WARM, "mode": "cold"}, H1)
    await app.complete_review_session(db, REVIEWER, cold.session_id, H1)
    held = await _bind(db, WARM, H2, review_id=cold.review_id)
    await app.heartbeat_review_session(db, REVIEWER, held.session_id, held.lease_id, timedelta(0))
    results = await asyncio.gather(
        *(_bind(db, WARM, H2, review_id=cold.review_id) for _ in range(4)), return_exceptions=True
    )
    won = [r for r in results if isinstance(r, app.Binding)]
    assert len(won) == 1 and won[0].session_id == cold.session_id
    assert all(isinstance(r, DomainError) and r.code is Code.WRONG_STATE for r in results if r not in won)
