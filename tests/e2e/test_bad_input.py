"""Bad input gets a problem+json with a clear detail and the right status, never a 500."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Api, draft


def assert_problem(response: object, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"] == "application/problem+json"  # type: ignore[attr-defined]
    problem: dict[str, object] = response.json()  # type: ignore[attr-defined]
    assert problem["code"] == code and problem["status"] == status
    assert problem["type"] == f"https://reviewloop.dev/problems/{code}"
    assert isinstance(problem["detail"], str) and len(problem["detail"]) > 10
    return problem


async def test_malformed_json_is_a_400(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.post(
        "/v1/messages", content=b'{"to": [', headers={**agent, "content-type": "application/json"}
    )
    problem = assert_problem(response, 400, "bad_request")
    assert "JSON" in str(problem["detail"])


@pytest.mark.parametrize("header", ["Bearer rlk_not-a-key", "Basic abc", ""])
async def test_a_wrong_key_is_a_401(api: Api, header: str) -> None:
    response = await api.http.get("/v1/reviews", headers={"Authorization": header} if header else {})
    assert_problem(response, 401, "unauthorized")


async def test_an_unknown_review_is_a_404(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.get("/v1/reviews/rr_01JAAAAAAAAAAAAAAAAAAAAAAA", headers=agent)
    problem = assert_problem(response, 404, "not_found")
    assert "rr_01JAAAAAAAAAAAAAAAAAAAAAAA" in str(problem["detail"])


async def test_an_over_long_field_is_a_422_naming_the_field_and_stores_nothing(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.post("/v1/messages", json=draft(subject="x" * 5000), headers=agent)
    problem = assert_problem(response, 422, "bad_request")
    assert problem["errors"][0]["field"] == "/subject"  # type: ignore[index]
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["reviews"] == []


async def test_a_body_over_the_limit_is_a_413(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.post(
        "/v1/messages", json=draft(body_text="x" * (5 * 1024 * 1024)), headers=agent
    )
    assert_problem(response, 413, "payload_too_large")


async def test_a_bad_recipient_is_a_400_naming_it(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.post("/v1/messages", json=draft(to=["not an address"]), headers=agent)
    problem = assert_problem(response, 400, "bad_request")
    assert problem["errors"][0]["field"] == "/to/0"  # type: ignore[index]


async def test_an_agent_key_cannot_reach_the_console(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.post("/v1/admin/projects", json={"name": "mine"}, headers=agent)
    assert_problem(response, 403, "forbidden_actor")


async def test_a_revoked_key_stops_working_at_once(api: Api) -> None:
    project = await api.project()
    key = await api.key(project["project_id"])
    headers = api.auth(key["api_key"])
    assert (await api.http.get("/v1/reviews", headers=headers)).status_code == 200
    revoked = await api.http.post(f"/v1/admin/api-keys/{key['key_id']}/revoke", headers=api.admin)
    assert revoked.status_code == 200
    assert_problem(await api.http.get("/v1/reviews", headers=headers), 401, "unauthorized")


@pytest.mark.parametrize(
    ("bad", "status"),
    [("Hi\u0000there", 400), ("Hi\ud800there", 422)],
    ids=["nul-refused-by-the-service", "lone-surrogate-refused-at-the-edge"],
)
async def test_text_no_store_can_hold_is_refused_naming_the_field(api: Api, bad: str, status: int) -> None:
    agent = await api.agent()
    response = await api.http.post(
        "/v1/messages",
        content=json.dumps(draft(body_text=bad)).encode(),
        headers={**agent, "content-type": "application/json"},
    )
    problem = assert_problem(response, status, "bad_request")
    assert problem["errors"][0]["field"] == "/body_text"  # type: ignore[index]
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["reviews"] == []
