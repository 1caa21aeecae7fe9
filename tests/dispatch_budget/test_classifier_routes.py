"""Issue 35, "The classifier is the deployment's", through the real gateway and services: a project picks
among the operator's endpoints by name and never names a URL, the deployment's key only goes to those
endpoints, an endpoint the SSRF rule refuses is never listed, and the decision log says "classifier
unavailable" without the port-scan detail. Also spec 001's confidentNo = 1 end to end: the gate only
observes, and gate-stats over the decision log the gateway answers reports no skip at 1.0."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from dispatch_budget.domain.gatestats import summarize

from tests.conftest import Api, Databases, start_stack
from tests.dispatch_budget.classifier_server import ClassifierServer, Script, answer
from tests.e2e.test_bad_input import assert_problem

KEY = "sk-deployment-classifier-key"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
async def servers() -> AsyncIterator[dict[str, ClassifierServer]]:
    started = {name: ClassifierServer() for name in ("deploy", "second", "attacker")}
    for server in started.values():
        await server.start()
    yield started
    for server in started.values():
        await server.stop()


@pytest.fixture(scope="module")
async def api(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory, servers: dict[str, ClassifierServer]
) -> AsyncIterator[Api]:
    down = f"http://127.0.0.1:{closed_port()}/classify"
    stack = await start_stack(
        databases,
        "sqlite",
        tmp_path_factory.mktemp("classifier-stack"),
        {
            "REVIEWLOOP_REVIEW_GATE_URL": servers["deploy"].url,
            "REVIEWLOOP_REVIEW_GATE_ENDPOINTS": (
                f"second={servers['second'].url},down={down},metadata=http://169.254.169.254/latest"
            ),
            "REVIEWLOOP_REVIEW_GATE_ALLOWED_NETWORKS": "127.0.0.1/32",
            "REVIEWLOOP_REVIEW_GATE_API_KEY_ENV": "TEST_CLASSIFIER_KEY",
            "TEST_CLASSIFIER_KEY": KEY,
        },
    )
    client = Api(stack)
    yield client
    await client.http.aclose()
    stack.stop_all()


async def _keys(api: Api) -> tuple[dict[str, str], dict[str, str]]:
    project = await api.project()
    admin = api.auth((await api.key(project["project_id"], "admin"))["api_key"])
    agent = api.auth((await api.key(project["project_id"], "agent"))["api_key"])
    return admin, agent


async def _configure(api: Api, admin: dict[str, str], **settings: Any) -> Any:
    return await api.http.put(
        "/v1/review-rounds/gate-config", json={"gate": "classifier", **settings}, headers=admin
    )


async def _turn(api: Api, agent: dict[str, str], session: str) -> Any:
    response = await api.http.post(
        f"/v1/sessions/{session}/turns",
        json={"status": "completed", "tool_calls": 16, "digest": {"last_human_message": "hi"}},
        headers=agent,
    )
    assert response.status_code == 200, response.text
    return response.json()["decision"]


async def test_a_project_picks_an_operator_endpoint_by_name_and_never_aims_the_key(
    api: Api, servers: dict[str, ClassifierServer]
) -> None:
    admin, agent = await _keys(api)
    for url in (servers["attacker"].url, "http://169.254.169.254/latest", "http://[::1]:80/"):
        refused = assert_problem(await _configure(api, admin, classifier_url=url), 422, "bad_request")
        assert "deployment settings" in str(refused["detail"]) and "default, second, down" in str(
            refused["detail"]
        )
    # An endpoint the SSRF rule refuses is never listed, so it cannot be picked.
    assert_problem(await _configure(api, admin, classifier_endpoint="metadata"), 422, "bad_request")
    assert_problem(await _configure(api, admin, classifier_endpoint="nope"), 422, "bad_request")
    configured = await _configure(api, admin, classifier_endpoint="second")
    assert configured.status_code == 200, configured.text
    effective = configured.json()["effective"]
    assert effective["classifier_endpoint"] == "second"
    assert effective["classifier_endpoints"] == ["default", "second", "down"]
    assert "127.0.0.1" not in orjson.dumps(configured.json()).decode()  # the operator's URLs stay its own
    servers["second"].script(answer("yes", 0.9))
    decision = await _turn(api, agent, "pick-1")
    assert decision["source"] == "classifier" and decision["reason"] == "yes (confidence 0.90)"
    assert servers["second"].headers[-1]["authorization"] == f"Bearer {KEY}"
    assert servers["attacker"].requests == []


async def test_the_decision_log_never_tells_why_an_endpoint_failed(
    api: Api, servers: dict[str, ClassifierServer]
) -> None:
    admin, agent = await _keys(api)
    assert (await _configure(api, admin, classifier_endpoint="down")).status_code == 200
    closed = await _turn(api, agent, "fail-1")
    assert (closed["decision"], closed["source"], closed["reason"]) == (
        "review",
        "counters",
        "fallback: classifier unavailable",
    )
    assert (await _configure(api, admin, classifier_endpoint="second")).status_code == 200
    servers["second"].script(Script(404, b"{}"))
    status = await _turn(api, agent, "fail-2")
    assert status["reason"] == "fallback: classifier unavailable"
    log = (await api.http.get("/v1/gate-decisions", headers=agent)).text
    for detail in ("http", "404", "timeout", "network", "refused", "Connect", "127.0.0.1"):
        assert detail not in log


async def test_confident_no_one_only_observes_and_gate_stats_agrees(
    api: Api, servers: dict[str, ClassifierServer]
) -> None:
    admin, agent = await _keys(api)
    assert (await _configure(api, admin, confident_no=1)).status_code == 200
    servers["deploy"].script(answer("no", 1.0), answer("no", 0.99))
    first = await _turn(api, agent, "observe-1")
    second = await _turn(api, agent, "observe-2")
    assert [d["decision"] for d in (first, second)] == ["review", "review"]
    assert first["reason"] == "no (confidence 1.00)" and first["threshold"] == 1
    lines = await api.http.get("/v1/gate-decisions", headers={**agent, "Accept": "application/x-ndjson"})
    stats = summarize(orjson.loads(line) for line in lines.text.splitlines())
    assert stats["decisions"] == {"review": 2}
    assert stats["would_skip"]["1.0"] == 0 and stats["would_skip"]["0.95"] == 2
