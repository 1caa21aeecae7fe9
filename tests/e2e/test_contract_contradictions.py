"""Spec 000's last contradictions (issue 34), each through the gateway: a keyed decision retried without a
version, a restamp that names nothing, a draft sent without a composition token, a verb on an approved
review whose send is in flight, a direct release that outlasts the wait, a second pending reply."""

from __future__ import annotations

import uuid
from typing import Any

from tests.conftest import Api, draft


async def _setup(api: Api) -> tuple[str, dict[str, str], dict[str, str]]:
    """A project with an agent key and a human key."""
    project = (await api.project())["project_id"]
    agent = api.auth((await api.key(project, "agent"))["api_key"])
    human = api.auth((await api.key(project, "human"))["api_key"])
    return project, agent, human


async def _send(api: Api, agent: dict[str, str], **overrides: Any) -> dict[str, Any]:
    response = await api.http.post("/v1/messages", json=draft(**overrides), headers=agent)
    assert response.status_code == 202, response.text
    return dict(response.json())


def _facts(problem: dict[str, Any]) -> set[tuple[str, Any]]:
    return {(e["field"], e["detail"]) for e in problem.get("errors", [])}


async def test_a_keyed_decision_retried_without_a_version_answers_the_replay(api: Api) -> None:
    _, agent, human = await _setup(api)
    review_id = (await _send(api, agent))["review_id"]
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200, opened.text
    keyed = {**human, "Idempotency-Key": f"decide-{uuid.uuid4().hex}"}
    body = {"action": "approve", "revision": opened.json()["revision"]}  # no version: the SDK's optional
    first = await api.http.post(f"/v1/reviews/{review_id}/decision", json=body, headers=keyed)
    assert first.status_code == 200, first.text
    # The first call moved the version on; the same body again is its replay, not "a different body".
    again = await api.http.post(f"/v1/reviews/{review_id}/decision", json=body, headers=keyed)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == review_id and again.json()["state"] in ("approved", "sent")
    # A different body under the key is still the caller's bug.
    other = await api.http.post(
        f"/v1/reviews/{review_id}/decision", json={**body, "action": "reject"}, headers=keyed
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict", other.text


async def test_a_restamp_that_names_no_rule_snapshot_is_422_naming_the_fields(api: Api) -> None:
    _, agent, _ = await _setup(api)
    review_id = (await _send(api, agent))["review_id"]
    before = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    unnamed = await api.http.post(
        f"/v1/reviews/{review_id}/restamp", json={"parent_revision": 1}, headers=agent
    )
    assert unnamed.status_code == 422, unnamed.text
    problem = unnamed.json()
    assert {e["field"] for e in problem["errors"]} >= {"/composition_token", "/against_version"}
    assert "composition_token" in problem["detail"] and "get_rules" in problem["detail"]
    after = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert after["version"] == before["version"]  # nothing recorded
    # Naming the snapshot re-read (the token of an unfiltered get_rules) stamps it.
    token = (await api.http.get("/v1/rules", headers=agent)).json()["composition_token"]
    named = await api.http.post(
        f"/v1/reviews/{review_id}/restamp",
        json={"parent_revision": 1, "composition_token": token},
        headers=agent,
    )
    assert named.status_code == 200, named.text
    assert named.json()["version"] == before["version"] + 1
