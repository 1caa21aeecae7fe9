"""Who may call the budget routes (issue 14, spec 003's "only the admission owner"): every route with
every key kind, through the real gateway and service on both backends. The table is docs/budget.md's
"Budget routes: who may call them"."""

from __future__ import annotations

from typing import Any

from reviewloop.client import AsyncReviewloop, Reviewloop

from tests.conftest import Api
from tests.e2e.test_bad_input import assert_problem

HEAD = "c" * 40
KINDS = ("agent", "human", "review_agent", "service", "admin")
READ = frozenset(KINDS)
REVIEWER = frozenset({"review_agent", "service"})
ADMIN = frozenset({"admin"})
RUN_OWNERS = frozenset({"admin", "service"})
SELECTION = {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "cold"}

# (method, path, json body, kinds allowed, the code the others get). {run}, {receipt}, {session} are
# filled per project.
ROUTES: list[tuple[str, str, Any, frozenset[str], str]] = [
    ("PUT", "/v1/review-rounds/runs/{run}", {"head_sha": HEAD}, REVIEWER | ADMIN, "forbidden_scope"),
    ("PUT", "/v1/review-rounds/runs/{run}", {"status": "archived"}, RUN_OWNERS, "forbidden_scope"),
    ("PUT", "/v1/review-rounds/runs/{run}", {"status": "published"}, RUN_OWNERS, "forbidden_scope"),
    ("PUT", "/v1/review-rounds/runs/{run}", {"status": "failed"}, RUN_OWNERS, "forbidden_scope"),
    (
        "POST",
        "/v1/review-rounds/admissions",
        {"run_id": "{run}", "attempt_key": "walk", "kind": "initial", "trigger": "operator_request"},
        REVIEWER,
        "forbidden_scope",
    ),
    (
        "POST",
        "/v1/review-rounds/admissions/{receipt}/settlement",
        {"no_verdict_reason": "timed_out"},
        frozenset({"review_agent"}),  # the admission owner only; the walk's receipt is a review agent's
        "forbidden_scope",
    ),
    ("GET", "/v1/review-rounds/budget?run_id={run}", None, READ, ""),
    (
        "POST",
        "/v1/runs/{run}/extend-review-budget",
        {"head_sha": HEAD, "limit": 6, "expected_limit": 5, "scope_brief": "walk", "request_id": "w"},
        ADMIN,
        "forbidden_scope",
    ),
    ("POST", "/v1/journals/{run}/events", {"events": []}, REVIEWER, "forbidden_scope"),
    ("GET", "/v1/journals/{run}/evidence", None, READ, ""),
    (
        "POST",
        "/v1/review-rounds/runners",
        {
            "name": "codex",
            "models": ["gpt-5"],
            "efforts": ["high"],
            "default_model": "gpt-5",
            "default_effort": "high",
        },
        ADMIN,
        "forbidden_scope",
    ),
    ("GET", "/v1/review-rounds/runners", None, READ, ""),
    ("PUT", "/v1/review-rounds/config", {"review": {"mode": "cold"}}, ADMIN, "forbidden_scope"),
    ("GET", "/v1/review-rounds/config", None, READ, ""),
    ("POST", "/v1/review-rounds/sequences/validate", {"sequence": [SELECTION]}, READ, ""),
    ("POST", "/v1/review-rounds/mode", {}, READ, ""),
    (
        "POST",
        "/v1/review-rounds/sessions",
        {
            "repository": "acme/api",
            "pr_number": 1,
            "selection": SELECTION,
            "base_sha": HEAD,
            "head_sha": HEAD,
        },
        REVIEWER,
        "forbidden_scope",
    ),
    (
        "POST",
        "/v1/review-rounds/sessions/{session}/complete",
        {"reviewed_head": HEAD},
        REVIEWER,
        "forbidden_scope",
    ),
    (
        "POST",
        "/v1/review-rounds/sessions/{session}/heartbeat",
        {"lease_id": "{lease}"},
        REVIEWER,
        "forbidden_scope",
    ),
    ("GET", "/v1/review-rounds/ready-gate?run_id={run}", None, READ, ""),
    ("PUT", "/v1/review-rounds/gate-config", {"timeout_minutes": 5}, ADMIN, "forbidden_scope"),
    ("GET", "/v1/review-rounds/gate-config", None, READ, ""),
    ("POST", "/v1/sessions/s1/turns", {"status": "completed"}, READ, ""),
    ("POST", "/v1/sessions/s1/review", {}, READ, ""),
    ("PUT", "/v1/sessions/s1/review-enabled", {"enabled": True}, READ, ""),
    ("POST", "/v1/sessions/s1/review/finish", {"succeeded": False}, READ, ""),
    ("GET", "/v1/gate-decisions", None, READ, ""),
]


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    return value


async def _project(api: Api) -> tuple[dict[str, dict[str, str]], str]:
    project = await api.project()
    keys = {kind: api.auth((await api.key(project["project_id"], kind))["api_key"]) for kind in KINDS}
    return keys, project["project_id"]


async def _run_and_receipt(
    api: Api, keys: dict[str, dict[str, str]], run: str, creator: str = "review_agent"
) -> str:
    recorded = await api.http.put(
        f"/v1/review-rounds/runs/{run}", json={"head_sha": HEAD}, headers=keys[creator]
    )
    assert recorded.status_code == 200, recorded.text
    admitted = await api.http.post(
        "/v1/review-rounds/admissions",
        json={"run_id": run, "attempt_key": f"{run}:1", "kind": "initial", "trigger": "operator_request"},
        headers=keys["review_agent"],
    )
    assert admitted.status_code == 201, admitted.text
    return str(admitted.json()["receipt"]["receipt_id"])


async def test_every_budget_route_with_every_key_kind(api: Api) -> None:
    keys, _ = await _project(api)
    # The service key creates the run, so it is the run's owning service.
    receipt = await _run_and_receipt(api, keys, "walk_run", creator="service")
    runner = {
        "name": "codex",
        "models": ["gpt-5"],
        "efforts": ["high"],
        "default_model": "gpt-5",
        "default_effort": "high",
    }
    assert (
        await api.http.post("/v1/review-rounds/runners", json=runner, headers=keys["admin"])
    ).status_code == 201
    bound = await api.http.post(
        "/v1/review-rounds/sessions",
        json={
            "repository": "acme/api",
            "pr_number": 1,
            "selection": SELECTION,
            "base_sha": HEAD,
            "head_sha": HEAD,
        },
        headers=keys["review_agent"],
    )
    assert bound.status_code == 201, bound.text
    names = {
        "run": "walk_run",
        "receipt": receipt,
        "session": bound.json()["session_id"],
        "lease": bound.json()["lease_id"],
    }
    walked = 0
    # The refused kinds first, so the allowed call that may change state (archive) comes last.
    for method, path, body, allowed, code in ROUTES:
        for kind in sorted(KINDS, key=lambda k: k in allowed):
            response = await api.http.request(
                method, _fill(path, names), json=_fill(body, names), headers=keys[kind]
            )
            if kind in allowed:
                assert response.status_code != 403, (method, path, kind, response.text)
            else:
                problem = assert_problem(response, 403, code)
                assert kind in str(problem["detail"]), problem
            walked += 1
    assert walked == len(ROUTES) * len(KINDS)


async def test_a_composer_or_human_key_writes_nothing_on_the_reviewer_plane(api: Api) -> None:
    keys, _ = await _project(api)
    receipt = await _run_and_receipt(api, keys, "run_a")
    for kind in ("agent", "human"):
        assert_problem(
            await api.http.post(
                f"/v1/review-rounds/admissions/{receipt}/settlement",
                json={"no_verdict_reason": "timed_out"},
                headers=keys[kind],
            ),
            403,
            "forbidden_scope",
        )  # no refund of the round
        assert_problem(
            await api.http.put(
                "/v1/review-rounds/runs/run_a", json={"status": "archived"}, headers=keys[kind]
            ),
            403,
            "forbidden_scope",
        )
    budget = await api.http.get("/v1/review-rounds/budget", params={"run_id": "run_a"}, headers=keys["agent"])
    assert budget.json()["used"] == 1 and budget.json()["no_verdict"] == 0
    # The run is still active: the reviewer plane keeps admitting.
    again = await api.http.post(
        "/v1/review-rounds/admissions",
        json={"run_id": "run_a", "attempt_key": "run_a:2", "kind": "retry", "trigger": "operator_request"},
        headers=keys["review_agent"],
    )
    assert again.status_code == 201, again.text


async def test_only_the_admission_owner_settles_its_receipt(api: Api) -> None:
    keys, project_id = await _project(api)
    receipt = await _run_and_receipt(api, keys, "run_b")
    other = api.auth((await api.key(project_id, "review_agent"))["api_key"])
    assert_problem(
        await api.http.post(
            f"/v1/review-rounds/admissions/{receipt}/settlement",
            json={"no_verdict_reason": "timed_out"},
            headers=other,
        ),
        403,
        "forbidden_scope",
    )
    budget = await api.http.get("/v1/review-rounds/budget", params={"run_id": "run_b"}, headers=other)
    assert budget.json()["used"] == 1
    settled = await api.http.post(
        f"/v1/review-rounds/admissions/{receipt}/settlement",
        json={"no_verdict_reason": "timed_out"},
        headers=keys["review_agent"],
    )
    assert settled.status_code == 200, settled.text
    assert settled.json()["review_round_budget"]["used"] == 0


async def test_a_service_key_is_the_reviewer_plane_and_never_a_person(api: Api) -> None:
    keys, _ = await _project(api)
    service = keys["service"]
    assert (
        await api.http.put("/v1/review-rounds/runs/run_s", json={"head_sha": HEAD}, headers=service)
    ).status_code == 200
    admitted = await api.http.post(
        "/v1/review-rounds/admissions",
        json={"run_id": "run_s", "attempt_key": "s:1", "kind": "initial", "trigger": "operator_request"},
        headers=service,
    )
    assert admitted.status_code == 201, admitted.text
    receipt = admitted.json()["receipt"]["receipt_id"]
    # The review agent did not admit it, so it cannot settle it; the service that did can.
    assert_problem(
        await api.http.post(
            f"/v1/review-rounds/admissions/{receipt}/settlement",
            json={"no_verdict_reason": "exited"},
            headers=keys["review_agent"],
        ),
        403,
        "forbidden_scope",
    )
    settled = await api.http.post(
        f"/v1/review-rounds/admissions/{receipt}/settlement",
        json={"verdict": "pass", "reviewed_head": HEAD},
        headers=service,
    )
    assert settled.status_code == 200, settled.text
    # An extension takes a person's authority: a service key cannot claim it, whatever it says.
    assert_problem(
        await api.http.post(
            "/v1/runs/run_s/extend-review-budget",
            json={
                "head_sha": HEAD,
                "limit": 6,
                "expected_limit": 5,
                "scope_brief": "x",
                "approved_by": "lead",
            },
            headers={**service, "Idempotency-Key": "svc"},
        ),
        403,
        "forbidden_scope",
    )
    failed = await api.http.put("/v1/review-rounds/runs/run_s", json={"status": "failed"}, headers=service)
    assert failed.status_code == 200 and failed.json()["status"] == "failed"


async def test_a_service_key_changes_the_status_only_of_runs_it_created(api: Api) -> None:
    keys, project_id = await _project(api)
    owner, admin = keys["service"], keys["admin"]
    other = api.auth((await api.key(project_id, "service"))["api_key"])
    for run, creator in (("run_mine", owner), ("run_theirs", other), ("run_reviewer", keys["review_agent"])):
        created = await api.http.put(
            f"/v1/review-rounds/runs/{run}", json={"head_sha": HEAD}, headers=creator
        )
        assert created.status_code == 200, created.text
    # Another service's run, and a run the reviewer plane created: refused, and nothing written.
    for run in ("run_theirs", "run_reviewer"):
        for status in ("archived", "published", "failed"):
            problem = assert_problem(
                await api.http.put(f"/v1/review-rounds/runs/{run}", json={"status": status}, headers=owner),
                403,
                "forbidden_scope",
            )
            assert run in str(problem["detail"]), problem
        again = await api.http.put(f"/v1/review-rounds/runs/{run}", json={"head_sha": HEAD}, headers=owner)
        assert again.json()["status"] == "active", again.text
    # Its own run: the service marks it; an admin marks any run.
    failed = await api.http.put("/v1/review-rounds/runs/run_mine", json={"status": "failed"}, headers=owner)
    assert failed.status_code == 200 and failed.json()["status"] == "failed", failed.text
    # A later snapshot by another principal does not take the run over.
    retaken = await api.http.put("/v1/review-rounds/runs/run_mine", json={"head_sha": HEAD}, headers=other)
    assert retaken.status_code == 200, retaken.text
    assert_problem(
        await api.http.put("/v1/review-rounds/runs/run_mine", json={"status": "archived"}, headers=other),
        403,
        "forbidden_scope",
    )
    archived = await api.http.put(
        "/v1/review-rounds/runs/run_mine", json={"status": "archived"}, headers=owner
    )
    assert archived.status_code == 200 and archived.json()["status"] == "archived", archived.text
    for run in ("run_theirs", "run_reviewer"):
        marked = await api.http.put(
            f"/v1/review-rounds/runs/{run}", json={"status": "archived"}, headers=admin
        )
        assert marked.status_code == 200 and marked.json()["status"] == "archived", marked.text


async def test_the_run_shows_its_owner_and_the_receipt_its_admission_owner(api: Api) -> None:
    """Issue 14: who may change a run's status, and who may settle a round, is on the shapes they read."""
    project = await api.project()
    issued = {kind: await api.key(project["project_id"], kind) for kind in ("service", "review_agent")}
    other = await api.key(project["project_id"], "service")
    url = str(api.http.base_url).rstrip("/")
    async with AsyncReviewloop(url, issued["service"]["api_key"]) as owner:
        run = await owner.record_review_run("run_owned", head_sha=HEAD)
    assert run.created_by is not None and run.created_by.startswith("service:")
    # Another principal's snapshot does not take the run over, and the answer says whose it is.
    retaken = await api.http.put(
        "/v1/review-rounds/runs/run_owned", json={"head_sha": HEAD}, headers=api.auth(other["api_key"])
    )
    assert retaken.status_code == 200 and retaken.json()["created_by"] == run.created_by, retaken.text
    with Reviewloop(url, other["api_key"]) as theirs:
        assert theirs.record_review_run("run_theirs").created_by not in (None, run.created_by)
    admitted = await api.http.post(
        "/v1/review-rounds/admissions",
        json={"run_id": "run_owned", "attempt_key": "o:1", "kind": "initial", "trigger": "operator_request"},
        headers=api.auth(issued["review_agent"]["api_key"]),
    )
    assert admitted.status_code == 201, admitted.text
    admitted_by = admitted.json()["receipt"]["admitted_by"]
    assert admitted_by.startswith("review_agent:") and admitted_by != run.created_by
