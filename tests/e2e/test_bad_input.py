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
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["items"] == []


async def test_a_body_over_the_limit_is_a_413(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.post(
        "/v1/messages", json=draft(body_text="x" * (5 * 1024 * 1024)), headers=agent
    )
    assert_problem(response, 413, "bad_request")


async def test_a_bad_recipient_is_a_422_naming_it(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.post("/v1/messages", json=draft(to=["not an address"]), headers=agent)
    problem = assert_problem(response, 422, "bad_request")
    assert problem["errors"][0]["field"] == "/to/0"  # type: ignore[index]


async def test_an_agent_key_cannot_reach_the_console(api: Api) -> None:
    agent = await api.agent()
    response = await api.http.post("/v1/admin/projects", json={"name": "mine"}, headers=agent)
    assert_problem(response, 403, "forbidden_scope")


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
    [("Hi\u0000there", 422), ("Hi\ud800there", 422)],
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
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["items"] == []


NUL = "a\u0000b"


async def test_a_nul_in_any_console_field_is_a_422_naming_it(api: Api) -> None:
    """PostgreSQL refuses NUL in text: each of these was a 500 there. None of them stores anything."""
    project = await api.project()
    key = await api.key(project["project_id"])
    cases: list[tuple[str, str, dict[str, object] | None, str]] = [
        ("POST", "/v1/admin/projects", {"name": NUL}, "/name"),
        ("POST", "/v1/admin/projects", {"name": "p", "org_id": NUL}, "/org_id"),
        ("POST", "/v1/admin/api-keys", {"project_id": NUL, "actor_kind": "agent"}, "/project_id"),
        (
            "POST",
            "/v1/admin/api-keys",
            {"project_id": project["project_id"], "actor_kind": "agent", "name": NUL},
            "/name",
        ),
        ("POST", f"/v1/admin/api-keys/{key['key_id']}%00/revoke", None, "/key_id"),
        ("PUT", "/v1/admin/projects/prj%00x/review-policy", {"policy": "require_review"}, "/project_id"),
        ("GET", "/v1/admin/projects/prj%00x/rule-settings", None, "/project_id"),
        ("GET", "/v1/reviews/rr_%00x", None, "/review_id"),
    ]
    for method, path, body, field in cases:
        content = json.dumps(body).encode() if body is not None else None
        headers = {**api.admin, "content-type": "application/json"}
        if path.startswith("/v1/reviews"):
            headers = await api.agent()
        response = await api.http.request(method, path, content=content, headers=headers)
        problem = assert_problem(response, 422, "bad_request")
        assert problem["errors"][0]["field"] == field, (method, path)  # type: ignore[index]
    # The key is untouched: the path with a NUL named no key.
    assert (await api.http.get("/v1/reviews", headers=api.auth(key["api_key"]))).status_code == 200


@pytest.mark.parametrize("big", [2**64, -(2**63) - 1, 10**30])
async def test_an_integer_beyond_64_bits_in_a_free_form_object_is_a_422_naming_it(api: Api, big: int) -> None:
    agent = await api.agent()
    meta = {"goal": "book_meeting", "deep": [{"n": big}]}
    sent = await api.http.post(
        "/v1/messages",
        content=json.dumps(draft(intent={"summary": "Re-engage Acme about Q3", "meta": meta})).encode(),
        headers={**agent, "content-type": "application/json"},
    )
    problem = assert_problem(sent, 422, "bad_request")
    assert problem["errors"][0]["field"] == "/intent/meta"  # type: ignore[index]
    assert "/deep/0/n" in str(problem["detail"])
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["items"] == []
    project = await api.project()
    admin = api.auth((await api.key(project["project_id"], "admin"))["api_key"])
    config = await api.http.put(
        "/v1/review-rounds/config",
        content=json.dumps({"review": {"mode": "warm", "limit": big}}).encode(),
        headers={**admin, "content-type": "application/json"},
    )
    assert_problem(config, 422, "bad_request")
    assert (await api.http.get("/v1/review-rounds/config", headers=admin)).json() == {"config": {}}


async def test_an_intents_meta_reads_back_as_sent_and_an_integer_it_cannot_carry_is_a_422(api: Api) -> None:
    # meta travels as a google.protobuf.Struct (doubles): integers within 2^53 come back as integers.
    agent = await api.agent()
    meta = {"goal": "book_meeting", "n": 3, "big": -(2**53), "x": 1.5, "deep": [{"ok": True, "none": None}]}
    sent = await api.http.post(
        "/v1/messages",
        content=json.dumps(draft(intent={"summary": "Re-engage Acme about Q3", "meta": meta})).encode(),
        headers={**agent, "content-type": "application/json"},
    )
    assert sent.status_code == 202, sent.text
    review = (await api.http.get(f"/v1/reviews/{sent.json()['review_id']}", headers=agent)).json()
    assert json.dumps(review["intent"]["meta"], sort_keys=True) == json.dumps(meta, sort_keys=True)

    meta["deep"] = [{"n": 2**53 + 1}]
    refused = await api.http.post(
        "/v1/messages",
        content=json.dumps(draft(intent={"summary": "Re-engage Acme about Q3", "meta": meta})).encode(),
        headers={**agent, "content-type": "application/json"},
    )
    problem = assert_problem(refused, 422, "bad_request")
    assert "/deep/0/n" in str(problem["detail"]) and "2^53" in str(problem["detail"])
    assert len((await api.http.get("/v1/reviews", headers=agent)).json()["items"]) == 1


async def test_a_405_names_the_methods_the_path_takes(api: Api) -> None:
    response = await api.http.delete("/v1/admin/projects", headers=api.admin)
    assert_problem(response, 405, "bad_request")
    assert response.headers["allow"] == "POST"
