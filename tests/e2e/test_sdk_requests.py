"""The SDK's request names on the composer's verbs (spec/SDK.md, issue 15), through the gateway:
``submit_revision``'s ``version`` and ``rules_version_seen``, ``restamp_review``'s ``against_version``,
``house_style_version`` and ``expected_version``. Each is the same compare-and-set, or the same born-stale
check, as the spec's own input, and a refusal writes nothing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.conftest import Api, draft


async def _agent_with_category(api: Api) -> tuple[dict[str, str], dict[str, str], str]:
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"], "agent"))["api_key"])
    human = api.auth((await api.key(project["project_id"], "human"))["api_key"])
    created = await api.http.post(
        f"/v1/admin/projects/{project['project_id']}/categories",
        json={"name": "Sales", "description": "outreach"},
        headers=api.admin,
    )
    assert created.status_code == 201, created.text
    return agent, human, str(created.json()["id"])


async def _rules(api: Api, agent: dict[str, str], category_id: str) -> dict[str, Any]:
    return dict((await api.http.get("/v1/rules", params={"category_id": category_id}, headers=agent)).json())


async def _queued(api: Api, agent: dict[str, str], category_id: str) -> tuple[str, dict[str, Any]]:
    """A draft of ``category_id`` composed under the rules in force, and those rules."""
    rules = await _rules(api, agent, category_id)
    sent = await api.http.post(
        "/v1/messages",
        json=draft(category_id=category_id, composition_token=rules["composition_token"]),
        headers=agent,
    )
    assert sent.status_code == 202, sent.text
    return str(sent.json()["review"]["id"]), rules


async def _new_category_rule(api: Api, human: dict[str, str], category_id: str, text: str) -> None:
    saved = await api.http.post(
        "/v1/rules", json={"rule_text": text, "scope": "category", "category_id": category_id}, headers=human
    )
    assert saved.status_code == 201, saved.text


async def _born_stale_nudge(api: Api, agent: dict[str, str], review_id: str) -> None:
    """The refused redraft or restamp re-nudged the agent (the outbox hop is asynchronous)."""
    deadline = time.monotonic() + 15
    while True:
        events = (
            await api.http.get("/v1/review-events", params={"review_id": review_id}, headers=agent)
        ).json()
        if any(e["reason"] == "rule_changed" and e["payload"].get("born_stale") for e in events["events"]):
            return
        assert time.monotonic() < deadline, events
        await asyncio.sleep(0.1)


async def test_a_redraft_names_the_row_version_it_read_as_the_sdks_version(api: Api) -> None:
    agent, _, category_id = await _agent_with_category(api)
    review_id, rules = await _queued(api, agent, category_id)
    redraft = f"/v1/reviews/{review_id}/revisions"
    body = {"parent_revision": 1, "text": "Tuesday 10:00?", "composition_token": rules["composition_token"]}
    moved = await api.http.post(f"/v1/reviews/{review_id}/chat", json={"text": "Tue or Wed?"}, headers=agent)
    assert moved.status_code == 200, moved.text
    now = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert now["version"] > 1 and now["revision"] == 1  # a chat moves the row, not the revision

    stale = await api.http.post(redraft, json={**body, "version": 1}, headers=agent)
    assert stale.status_code == 409 and stale.json()["code"] == "stale", stale.text
    assert stale.json()["current_state"]["version"] == now["version"]
    after = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert (after["revision"], after["version"]) == (1, now["version"])  # no mutation

    passed = await api.http.post(redraft, json={**body, "version": now["version"]}, headers=agent)
    assert passed.status_code == 200, passed.text
    assert (passed.json()["revision"], passed.json()["proposed_body_text"]) == (2, "Tuesday 10:00?")


async def test_a_redraft_built_against_an_older_rules_version_seen_is_born_stale(api: Api) -> None:
    agent, human, category_id = await _agent_with_category(api)
    review_id, before = await _queued(api, agent, category_id)
    await _new_category_rule(api, human, category_id, "Propose a concrete time.")
    after = await _rules(api, agent, category_id)
    assert after["rule_high_water"] > before["rule_high_water"]
    redraft = f"/v1/reviews/{review_id}/revisions"
    body = {"parent_revision": 1, "text": "Tuesday 10:00?", "built_at": "2026-01-01T09:00:00Z"}

    old = await api.http.post(
        redraft, json={**body, "rules_version_seen": before["rule_high_water"]}, headers=agent
    )
    assert old.status_code == 409 and old.json()["code"] == "born_stale", old.text
    assert (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()["revision"] == 1
    await _born_stale_nudge(api, agent, review_id)

    ahead = await api.http.post(
        redraft, json={**body, "rules_version_seen": after["rule_high_water"] + 1}, headers=agent
    )
    assert ahead.status_code == 422 and ahead.json()["errors"][0]["field"] == "/rules_version_seen", (
        ahead.text
    )

    current = await api.http.post(
        redraft, json={**body, "rules_version_seen": after["rule_high_water"]}, headers=agent
    )
    assert current.status_code == 200 and current.json()["revision"] == 2, current.text
    backlog = (await api.http.get(f"/v1/categories/{category_id}/backlog", headers=agent)).json()
    assert (backlog["queued"], backlog["stale"]) == (1, 0)


async def test_a_restamp_names_the_rules_versions_it_reread_as_the_sdk_does(api: Api) -> None:
    agent, human, category_id = await _agent_with_category(api)
    review_id, before = await _queued(api, agent, category_id)
    await _new_category_rule(api, human, category_id, "Sign off with a first name.")
    after = await _rules(api, agent, category_id)
    assert after["category_rules_version"] > before["category_rules_version"]
    backlog = f"/v1/categories/{category_id}/backlog"
    assert (await api.http.get(backlog, headers=agent)).json()["stale"] == 1
    restamp = f"/v1/reviews/{review_id}/restamp"
    version = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()["version"]

    older = await api.http.post(
        restamp, json={"against_version": before["category_rules_version"]}, headers=agent
    )
    assert older.status_code == 409 and older.json()["code"] == "born_stale", older.text
    await _born_stale_nudge(api, agent, review_id)
    ahead = await api.http.post(
        restamp,
        json={"against_version": after["category_rules_version"], "house_style_version": 99},
        headers=agent,
    )
    assert ahead.status_code == 422 and ahead.json()["errors"][0]["field"] == "/house_style_version", (
        ahead.text
    )
    wrong_row = await api.http.post(
        restamp,
        json={"against_version": after["category_rules_version"], "expected_version": version + 5},
        headers=agent,
    )
    assert wrong_row.status_code == 409 and wrong_row.json()["code"] == "stale", wrong_row.text
    assert (await api.http.get(backlog, headers=agent)).json()["stale"] == 1  # nothing was stamped

    restamped = await api.http.post(
        restamp,
        json={
            "against_version": after["category_rules_version"],
            "house_style_version": after["house_style_version"],
            "expected_version": version,
        },
        headers=agent,
    )
    assert restamped.status_code == 200, restamped.text
    assert (restamped.json()["revision"], restamped.json()["version"]) == (1, version + 1)
    assert (await api.http.get(backlog, headers=agent)).json()["stale"] == 0


async def test_a_redraft_records_the_recheck_it_handled_and_no_seq_the_review_lacks(api: Api) -> None:
    """The catalog's ``recheck_through_seq`` on ``submit_revision``: a seq past the review's newest nudge is a
    422 naming it (nothing written); one it has raises ``recheck_completed_through_seq``."""
    agent, human, category_id = await _agent_with_category(api)
    review_id, _ = await _queued(api, agent, category_id)
    await _new_category_rule(api, human, category_id, "Sign off with a first name.")
    deadline = time.monotonic() + 15
    while True:  # the rule reaches review_state, whose window nudges the draft: the recheck to handle
        listed = await api.http.get("/v1/review-events", params={"review_id": review_id}, headers=agent)
        rechecks = [e for e in listed.json()["events"] if e["reason"] == "rule_changed"]
        if rechecks:
            break
        assert time.monotonic() < deadline, listed.text
        await asyncio.sleep(0.1)
    seq = rechecks[-1]["seq"]
    rules = await _rules(api, agent, category_id)
    redraft = f"/v1/reviews/{review_id}/revisions"
    body = {
        "parent_revision": 1,
        "text": "Thursday 2pm? Best, Ann",
        "rules_version_seen": rules["rule_high_water"],
    }
    too_far = await api.http.post(redraft, json={**body, "recheck_through_seq": seq + 1}, headers=agent)
    assert too_far.status_code == 422 and too_far.json()["errors"][0]["field"] == "/recheck_through_seq", (
        too_far.text
    )
    unchanged = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert (unchanged["revision"], unchanged["recheck_completed_through_seq"]) == (1, 0)
    redrafted = await api.http.post(redraft, json={**body, "recheck_through_seq": seq}, headers=agent)
    assert redrafted.status_code == 200, redrafted.text
    assert (redrafted.json()["revision"], redrafted.json()["recheck_completed_through_seq"]) == (2, seq)


async def test_a_refused_send_hands_its_text_back_as_unsent_text(api: Api) -> None:
    """The SDK's ``unsent_text`` extra: a send refused before anything was queued answers with its text."""
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"], "agent"))["api_key"])
    text = "Can you do Thursday 2pm?"
    refused = await api.http.post(
        "/v1/messages", json={"to": ["vp@acme.com"], "subject": "Q3 pilot", "text": text}, headers=agent
    )
    assert refused.status_code == 422 and refused.json()["code"] == "intent_required", refused.text
    assert refused.json()["unsent_text"] == text
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["items"] == []
    sent = await api.http.post(
        "/v1/messages",
        json={**{k: v for k, v in draft().items() if k != "body_text"}, "text": text},
        headers=agent,
    )
    assert sent.status_code == 202 and "unsent_text" not in sent.json(), sent.text
