"""Backlog reconciliation and pacing through the gateway (issue 15, item 3): a new rule never nudges the
whole queue; the agent is nudged a look-ahead window at a time and reaches every stale draft by working
through them; a stale draft is held from release until it is redrafted or restamped."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.conftest import Api, draft

LOOKAHEAD = 3


async def _project(api: Api) -> tuple[dict[str, Any], dict[str, str], dict[str, str], str]:
    """A project with an agent and a human key, one category, and no minimum interval between refills."""
    project = await api.project()
    pid = project["project_id"]
    agent = api.auth((await api.key(pid, "agent"))["api_key"])
    human = api.auth((await api.key(pid, "human"))["api_key"])
    category = await api.http.post(
        f"/v1/admin/projects/{pid}/categories",
        json={"name": "Outreach", "description": "x"},
        headers=api.admin,
    )
    assert category.status_code == 201, category.text
    pacing = await api.http.put(
        f"/v1/admin/projects/{pid}/pacing", json={"nudge_min_interval_ms": 0}, headers=api.admin
    )
    assert pacing.status_code == 200, pacing.text
    assert pacing.json() == {
        "project_id": pid,
        "lookahead_window": LOOKAHEAD,
        "rework_batch_max": 10,
        "nudge_min_interval_ms": 0,
    }
    return project, agent, human, category.json()["id"]


async def _submit(api: Api, agent: dict[str, str], category_id: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        sent = await api.http.post(
            "/v1/messages", json=draft(category_id=category_id, subject=f"Q3 pilot {i}"), headers=agent
        )
        assert sent.status_code == 202, sent.text
        ids.append(sent.json()["review_id"])
    return ids


async def _propagations(api: Api, agent: dict[str, str], timeout_s: float = 15.0) -> list[dict[str, Any]]:
    """The un-acked propagation nudges, once there are any (they cross two outboxes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listed = await api.http.get("/v1/review-events", params={"limit": 100}, headers=agent)
        assert listed.status_code == 200, listed.text
        events = [e for e in listed.json()["events"] if e["reason"] == "propagate_general_rule"]
        if events or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.05)


async def _backlog(api: Api, agent: dict[str, str], category_id: str) -> dict[str, Any]:
    response = await api.http.get(f"/v1/categories/{category_id}/backlog", headers=agent)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def _pacing(api: Api, agent: dict[str, str], category_id: str) -> dict[str, Any]:
    response = await api.http.get(f"/v1/categories/{category_id}/pacing", headers=agent)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_two_hundred_stale_drafts_are_reached_a_look_ahead_window_at_a_time(api: Api) -> None:
    count = 200
    project, agent, _, category_id = await _project(api)
    ids = await _submit(api, agent, category_id, count)
    assert (await _backlog(api, agent, category_id))["stale"] == 0

    rule = await api.http.post(
        f"/v1/admin/orgs/{project['org_id']}/rules",
        json={"rule_text": "No exclamation marks."},
        headers=api.admin,
    )
    assert rule.status_code == 201, rule.text
    rules = (await api.http.get("/v1/rules", params={"category_id": category_id}, headers=agent)).json()
    token = rules["composition_token"]

    reached: list[str] = []
    stale_seen = [(await _backlog(api, agent, category_id))["stale"]]
    assert stale_seen == [count]  # the new general rule made every queued draft stale
    while len(reached) < count:
        nudges = await _propagations(api, agent)
        assert nudges, f"no propagation nudge after {len(reached)} of {count} drafts"
        assert len(nudges) <= LOOKAHEAD  # never the whole queue
        pacing = await _pacing(api, agent, category_id)
        assert pacing["redrafting"] <= LOOKAHEAD
        in_flight = {i["review_id"] for i in pacing["items"] if i["state"] == "in_window_redrafting"}
        assert {n["review_id"] for n in nudges} <= in_flight
        for nudge in nudges:
            payload = nudge["payload"]
            assert payload["rule"]["id"] == rule.json()["id"]
            assert payload["suggested_batch"] == LOOKAHEAD
            # The siblings still stale when it was sent: it counts down as the agent works.
            assert payload["siblings"]["category_id"] == category_id
            assert count - len(reached) - 1 <= payload["siblings"]["pending_count"] <= count - 1
            review_id = nudge["review_id"]
            if len(reached) % 10 == 0:  # a real redraft now and then; an honest restamp for the rest
                done = await api.http.post(
                    f"/v1/reviews/{review_id}/revisions",
                    json={
                        "parent_revision": 1,
                        "body_text": "Let me know your thoughts.",
                        "composition_token": token,
                    },
                    headers=agent,
                )
            else:
                done = await api.http.post(
                    f"/v1/reviews/{review_id}/restamp",
                    json={"parent_revision": 1, "composition_token": token},
                    headers=agent,
                )
            assert done.status_code == 200, done.text
            acked = await api.http.post(
                "/v1/review-events/ack",
                json={"acks": [{"review_id": review_id, "through_seq": nudge["seq"]}]},
                headers=agent,
            )
            assert acked.status_code == 200, acked.text
            reached.append(review_id)
        stale_seen.append((await _backlog(api, agent, category_id))["stale"])
        assert stale_seen[-1] == count - len(reached)  # the backlog counts down

    assert sorted(reached) == sorted(ids) and len(set(reached)) == count  # every draft, each once
    final = await _pacing(api, agent, category_id)
    assert (final["stale"], final["redrafting"], final["next_review_ids"]) == (0, 0, [])
    assert final["released_count"] == count and final["in_window"] == count
    assert final["cursor_advanced_count"] == 0 and "cursor_review_id" not in final  # no human decided yet
    assert (await _backlog(api, agent, category_id))["in_flight"] == 0


async def test_a_stale_draft_is_refused_approval_until_restamped(api: Api) -> None:
    _, agent, human, category_id = await _project(api)
    [review_id] = await _submit(api, agent, category_id, 1)
    rule = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Sign with a first name.", "scope": "category", "category_id": category_id,
              "propagate_to_pending": False},
        headers=agent,
    )  # fmt: skip
    assert rule.status_code == 201, rule.text
    deadline = time.monotonic() + 15
    while (await _pacing(api, agent, category_id))["stale"] == 0:  # the rule reaches review_state
        assert time.monotonic() < deadline, "the rule change never reached review_state"
        await asyncio.sleep(0.05)
    pacing = await _pacing(api, agent, category_id)
    assert [i["state"] for i in pacing["items"]] == ["ahead"] and pacing["next_review_ids"] == []

    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
    )
    refused = await api.http.post(
        f"/v1/reviews/{review_id}/decision",
        json={"action": "approve", "revision": 1, "version": opened.json()["version"]},
        headers=human,
    )
    assert refused.status_code == 409 and refused.json()["code"] == "born_stale", refused.text
    review = (await api.http.get(f"/v1/reviews/{review_id}", headers=human)).json()
    assert review["state"] == "in_review" and review["version"] == opened.json()["version"]  # no mutation


async def test_pacing_settings_are_console_authority_and_checked(api: Api) -> None:
    project, agent, _, category_id = await _project(api)
    pid = project["project_id"]
    as_agent = await api.http.put(
        f"/v1/admin/projects/{pid}/pacing", json={"lookahead_window": 9}, headers=agent
    )
    assert as_agent.status_code in (401, 403), as_agent.text
    bad = await api.http.put(
        f"/v1/admin/projects/{pid}/pacing", json={"lookahead_window": 0}, headers=api.admin
    )
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
    reset = await api.http.put(
        f"/v1/admin/projects/{pid}/pacing", json={"nudge_min_interval_ms": None, "rework_batch_max": 4},
        headers=api.admin,
    )  # fmt: skip
    assert reset.json()["nudge_min_interval_ms"] == 5000 and reset.json()["rework_batch_max"] == 4
    read = (await api.http.get(f"/v1/admin/projects/{pid}/pacing", headers=api.admin)).json()
    assert read == reset.json()
    pacing = await _pacing(api, agent, category_id)
    assert (pacing["lookahead_window"], pacing["rework_batch_max"], pacing["nudge_min_interval_ms"]) == (
        3,
        4,
        5000,
    )
    other = await api.agent()
    assert (await api.http.get(f"/v1/categories/{category_id}/pacing", headers=other)).status_code == 404
    too_big = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Be brief.", "scope": "general", "suggested_batch": 101},
        headers=agent,
    )
    assert too_big.status_code == 422, too_big.text


async def test_the_review_cursor_is_the_draft_a_human_last_decided_and_drafts_it_passed_are_behind_it(
    api: Api,
) -> None:
    """The SDK's cursor: the queued drafts before the one a human last decided were passed over
    (``behind_cursor``); a rejected draft leaves the human queue, so it is no item."""
    _, agent, human, category_id = await _project(api)
    first, second, third = await _submit(api, agent, category_id, 3)
    pacing = await _pacing(api, agent, category_id)
    assert (pacing["cursor_advanced_count"], "cursor_review_id" in pacing) == (0, False)
    assert [i["state"] for i in pacing["items"]] == ["in_window_fresh"] * 3

    opened = await api.http.post(
        f"/v1/reviews/{second}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200, opened.text
    rejected = await api.http.post(
        f"/v1/reviews/{second}/decision",
        json={"action": "reject", "revision": 1, "version": opened.json()["version"], "feedback": "Shorter."},
        headers=human,
    )
    assert rejected.status_code == 200, rejected.text
    pacing = await _pacing(api, agent, category_id)
    assert (pacing["cursor_review_id"], pacing["cursor_advanced_count"]) == (second, 1)
    assert [(i["review_id"], i["state"]) for i in pacing["items"]] == [
        (first, "behind_cursor"),
        (third, "in_window_fresh"),
    ]
    assert (pacing["queued"], pacing["in_window"], pacing["redrafting"]) == (2, 1, 0)
    assert pacing["pending"] == 3  # ours: the rejected draft is still the agent's to redraft
