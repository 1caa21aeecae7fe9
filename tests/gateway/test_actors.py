"""Every actor boundary (DESIGN.md "Auth"): agent vs human vs review_agent vs admin vs the bootstrap token,
and cross-project access, each tried and refused with the right problem."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.conftest import Api, draft
from tests.e2e.test_bad_input import assert_problem

NON_ADMIN_KINDS = ["agent", "human", "review_agent"]
# Reviewer-plane verbs an agent (composer) key may never use; tried where the route exists yet.
REVIEWER_VERBS = [("post", "/v1/reviews/{review_id}/open"), ("post", "/v1/reviews/{review_id}/decision")]


async def keys(api: Api) -> dict[str, Any]:
    project = await api.project()
    found: dict[str, Any] = {"project": project}
    for kind in (*NON_ADMIN_KINDS, "admin"):
        issued = await api.key(project["project_id"], kind)
        found[kind] = {**issued, "headers": api.auth(issued["api_key"])}
    return found


async def openapi(api: Api) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((await api.http.get("/openapi.yaml")).text)
    return document


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x_01JAAAAAAAAAAAAAAAAAAAAAAA", path)


async def test_only_admin_keys_and_the_bootstrap_token_reach_the_console(api: Api) -> None:
    found = await keys(api)
    document = await openapi(api)
    console = [
        (method, path)
        for path, item in document["paths"].items()
        if path.startswith("/v1/admin/")
        for method in item
    ]
    assert ("post", "/v1/admin/projects") in console
    for kind in NON_ADMIN_KINDS:
        for method, path in console:
            response = await api.http.request(
                method.upper(), concrete(path), json={}, headers=found[kind]["headers"]
            )
            assert_problem(response, 403, "forbidden_scope")
    mine = await api.http.post(
        "/v1/admin/projects",
        json={"name": "second", "org_id": found["project"]["org_id"]},
        headers=found["admin"]["headers"],
    )
    assert mine.status_code == 201 and mine.json()["org_id"] == found["project"]["org_id"]


async def test_an_admin_key_cannot_touch_another_org(api: Api) -> None:
    mine, theirs = await keys(api), await keys(api)
    admin = mine["admin"]["headers"]
    other_org = theirs["project"]["org_id"]
    assert_problem(
        await api.http.post("/v1/admin/projects", json={"name": "x", "org_id": other_org}, headers=admin),
        404,
        "not_found",
    )
    assert_problem(
        await api.http.post(
            "/v1/admin/api-keys",
            json={"project_id": theirs["project"]["project_id"], "actor_kind": "agent"},
            headers=admin,
        ),
        404,
        "not_found",
    )
    assert_problem(
        await api.http.post(f"/v1/admin/api-keys/{theirs['agent']['key_id']}/revoke", headers=admin),
        404,
        "not_found",
    )
    # Their key still works: the refused revoke changed nothing.
    assert (await api.http.get("/v1/reviews", headers=theirs["agent"]["headers"])).status_code == 200


@pytest.mark.parametrize("kind", ["human", "review_agent", "admin"])
async def test_only_an_agent_key_composes(api: Api, kind: str) -> None:
    found = await keys(api)
    refused = await api.http.post("/v1/messages", json=draft(), headers=found[kind]["headers"])
    problem = assert_problem(refused, 403, "forbidden_scope")
    assert "agent" in str(problem["detail"])
    assert (await api.http.get("/v1/reviews", headers=found["agent"]["headers"])).json()["items"] == []


async def test_the_bootstrap_token_has_no_tenant_for_project_verbs(api: Api) -> None:
    for method, path, body in [
        ("GET", "/v1/reviews", None),
        ("GET", "/v1/review-events", None),
        ("POST", "/v1/messages", draft()),
    ]:
        assert_problem(
            await api.http.request(method, path, json=body, headers=api.admin), 403, "forbidden_scope"
        )


async def test_an_agent_key_cannot_use_a_reviewer_verb(api: Api) -> None:
    found = await keys(api)
    document = await openapi(api)
    agent = found["agent"]["headers"]
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    tried = 0
    for method, path in REVIEWER_VERBS:
        if method not in document["paths"].get(path, {}):
            continue
        tried += 1
        body = {"action": "approve", "revision": 1, "version": 1}
        response = await api.http.request(
            method.upper(), path.replace("{review_id}", review_id), json=body, headers=agent
        )
        assert_problem(response, 403, "forbidden_scope")
    review = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert (review["state"], review["version"]) == ("needs_review", 1)
    if not tried:
        pytest.skip("no reviewer-plane route is served yet")


async def test_another_projects_review_is_not_found_never_forbidden(api: Api) -> None:
    mine, theirs = await keys(api), await keys(api)
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=mine["agent"]["headers"])).json()[
        "review_id"
    ]
    for kind in ("agent", "human", "review_agent", "admin"):
        headers = theirs[kind]["headers"]
        assert_problem(await api.http.get(f"/v1/reviews/{review_id}", headers=headers), 404, "not_found")
        listed = await api.http.get("/v1/reviews", headers=headers)
        assert review_id not in {r["id"] for r in listed.json()["items"]}
    for kind in ("agent", "human"):
        cancel = await api.http.post(
            f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=theirs[kind]["headers"]
        )
        assert_problem(cancel, 404, "not_found")
    acked = await api.http.post(
        "/v1/review-events/ack",
        json={"acks": [{"review_id": review_id, "seq": 1}]},
        headers=theirs["agent"]["headers"],
    )
    assert acked.status_code in (400, 404, 422), acked.text
    # Untouched by all of that: still the composer's live draft.
    review = (await api.http.get(f"/v1/reviews/{review_id}", headers=mine["agent"]["headers"])).json()
    assert (review["state"], review["version"]) == ("needs_review", 1)


async def test_a_human_of_the_same_project_reads_and_may_withdraw(api: Api) -> None:
    found = await keys(api)
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=found["agent"]["headers"])).json()[
        "review_id"
    ]
    human = found["human"]["headers"]
    assert (await api.http.get(f"/v1/reviews/{review_id}", headers=human)).json()["id"] == review_id
    cancelled = await api.http.post(
        f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=human
    )
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    refused = await api.http.post(
        f"/v1/reviews/{review_id}/cancel",
        json={"parent_revision": 1},
        headers=found["review_agent"]["headers"],
    )
    assert_problem(refused, 403, "forbidden_scope")


async def test_revocation_is_immediate_for_every_kind(api: Api) -> None:
    found = await keys(api)
    for kind in (*NON_ADMIN_KINDS, "admin"):
        headers = found[kind]["headers"]
        assert (await api.http.get("/v1/review-events", headers=headers)).status_code == 200
        revoked = await api.http.post(f"/v1/admin/api-keys/{found[kind]['key_id']}/revoke", headers=api.admin)
        assert revoked.json() == {"key_id": found[kind]["key_id"], "revoked": True}
        assert_problem(await api.http.get("/v1/review-events", headers=headers), 401, "unauthorized")
