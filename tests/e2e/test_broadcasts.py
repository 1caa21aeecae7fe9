"""Broadcast nudges through the gateway (issue 15 item 4; the SDK's ReviewEvent with ``seq`` 0 and no
``review_id``): a rule change reaches every agent it governs, each acks it by id for itself, and it is never
shown to that agent again. The drain and the wait filter by review and answer each review's cursor."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api, draft
from tests.e2e.helpers import events_until


async def project_agents(
    api: Api, count: int, org_id: str | None = None
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """A new project (in ``org_id`` when given) and the auth headers of ``count`` agent keys of it."""
    body = {"name": "broadcasts", **({"org_id": org_id} if org_id else {})}
    project = (await api.http.post("/v1/admin/projects", json=body, headers=api.admin)).json()
    keys = [await api.key(project["project_id"]) for _ in range(count)]
    return project, [api.auth(k["api_key"]) for k in keys]


def broadcasts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["seq"] == 0]


async def save_rule(api: Api, headers: dict[str, str], text: str) -> dict[str, Any]:
    saved = await api.http.post("/v1/rules", json={"rule_text": text, "scope": "general"}, headers=headers)
    assert saved.status_code == 201, saved.text
    return dict(saved.json())


async def test_a_rule_change_reaches_every_agent_as_a_broadcast_each_acks_for_itself(api: Api) -> None:
    project, (first, second) = await project_agents(api, 2)
    human = api.auth((await api.key(project["project_id"], "human"))["api_key"])
    _, (stranger,) = await project_agents(api, 1)
    rule = await save_rule(api, human, "Propose a concrete time.")

    (seen_first,) = broadcasts(await events_until(api, first, 1))
    (seen_second,) = broadcasts(await events_until(api, second, 1))
    assert seen_first == seen_second  # one broadcast, one stable id, for every agent of the project
    assert "review_id" not in seen_first
    assert seen_first["reason"] == "rule_changed"
    assert seen_first["payload"]["rule"]["id"] == rule["id"]
    assert seen_first["payload"]["rule"]["rule_text"] == "Propose a concrete time."
    assert seen_first["payload"]["scope"] == "general" and seen_first["payload"]["rule_high_water"] >= 1
    assert await events_until(api, stranger, 1, timeout_s=0.5) == []  # another project hears nothing

    # Another project's key cannot ack it (404), and an ack naming it with a bad review ack takes nothing.
    foreign = await api.http.post(
        "/v1/review-events/ack", json={"broadcast_ids": [seen_first["id"]]}, headers=stranger
    )
    assert foreign.status_code == 404, foreign.text
    refused = await api.http.post(
        "/v1/review-events/ack",
        json={"broadcast_ids": [seen_first["id"]], "acks": [{"review_id": "rr_unknown", "through_seq": 1}]},
        headers=first,
    )
    assert refused.status_code == 404, refused.text
    assert broadcasts(await events_until(api, first, 1)) == [seen_first]

    acked = await api.http.post(
        "/v1/review-events/ack", json={"broadcast_ids": [seen_first["id"]]}, headers=first
    )
    assert acked.status_code == 200, acked.text
    assert acked.json() == {"acked": 1, "cursors": []}
    again = await api.http.post(
        "/v1/review-events/ack", json={"broadcast_ids": [seen_first["id"]]}, headers=first
    )
    assert again.status_code == 200, again.text  # idempotent

    assert (await api.http.get("/v1/review-events", headers=first)).json()["events"] == []
    waited = await api.http.get("/v1/review-events/wait", params={"wait_seconds": 1}, headers=first)
    assert waited.json()["events"] == []
    # The other agent still has it until it acks it itself.
    assert broadcasts(await events_until(api, second, 1)) == [seen_second]


async def test_an_org_house_style_rule_is_broadcast_to_every_project_of_the_org(api: Api) -> None:
    project, (agent,) = await project_agents(api, 1)
    org_id = project["org_id"]
    _, (sibling,) = await project_agents(api, 1, org_id=org_id)
    created = await api.http.post(
        f"/v1/admin/orgs/{org_id}/rules", json={"rule_text": "Sign off with a first name."}, headers=api.admin
    )
    assert created.status_code == 201, created.text
    (here,) = broadcasts(await events_until(api, agent, 1))
    (there,) = broadcasts(await events_until(api, sibling, 1))
    assert here["id"] == there["id"] and here["payload"]["rule"]["rule_text"] == "Sign off with a first name."


async def test_the_drain_filters_by_review_and_answers_each_reviews_cursor(api: Api) -> None:
    project, (agent,) = await project_agents(api, 1)
    human = api.auth((await api.key(project["project_id"], "human"))["api_key"])
    reviews = []
    for _ in range(2):
        sent = await api.http.post("/v1/messages", json=draft(), headers=agent)
        reviews.append(sent.json()["review_id"])
        cancelled = await api.http.post(f"/v1/reviews/{reviews[-1]}/cancel", json={}, headers=agent)
        assert cancelled.status_code == 200, cancelled.text
    await save_rule(api, human, "Keep it under 120 words.")
    everything = await events_until(api, agent, 3)
    assert {e.get("review_id") for e in everything} == {*reviews, None}

    first, second = reviews
    mine = (await api.http.get("/v1/review-events", params={"review_id": first}, headers=agent)).json()
    assert [(e["review_id"], e["reason"]) for e in mine["events"]] == [(first, "cancelled")]
    assert mine["cursors"] == [{"review_id": first, "last_acked_seq": 0}]

    acked = await api.http.post(
        "/v1/review-events/ack", json={"acks": [{"review_id": first, "through_seq": 1}]}, headers=agent
    )
    assert acked.json() == {"acked": 1, "cursors": [{"review_id": first, "last_acked_seq": 1}]}
    # The filtered drain now holds nothing, and says where the review's cursor stands.
    after = (await api.http.get("/v1/review-events", params={"review_id": first}, headers=agent)).json()
    assert after == {
        "events": [],
        "next_cursor": None,
        "cursors": [{"review_id": first, "last_acked_seq": 1}],
    }
    waited = await api.http.get(
        "/v1/review-events/wait", params={"review_id": second, "wait_seconds": 1}, headers=agent
    )
    assert [e["review_id"] for e in waited.json()["events"]] == [second]
    assert waited.json()["cursors"] == [{"review_id": second, "last_acked_seq": 0}]
    # The unfiltered drain: the broadcast and the second review's nudge, with that review's cursor.
    rest = (await api.http.get("/v1/review-events", headers=agent)).json()
    assert sorted((e["seq"], e.get("review_id", "")) for e in rest["events"]) == [(0, ""), (1, second)]
    assert rest["cursors"] == [{"review_id": second, "last_acked_seq": 0}]
