"""Rule scopes through the gateway and real processes: a decision's new rule as house style or for the
review's agent, save_rule's ``scope_agent_id`` and ``source_turn_id``, promote_rule to org house style,
and merge_categories (rules and pending drafts move, the merged category retires, agents recheck)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tests.conftest import Api, draft
from tests.e2e.helpers import events_until
from tests.e2e.test_rules import Org

T = TypeVar("T")


async def _eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout_s: float = 15.0) -> T:
    """``probe``'s first answer that is not None: the effect crosses an outbox hop asynchronously."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await probe()
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.1)


async def _rule(api: Api, headers: dict[str, str], rule_id: str, **query: str) -> dict[str, Any]:
    """The rule ``rule_id`` on the caller's ladder, once the rules context saved it."""

    async def probe() -> dict[str, Any] | None:
        rules = (await api.http.get("/v1/rules", params=query, headers=headers)).json()["items"]
        return next((r for r in rules if r["id"] == rule_id), None)

    return await _eventually(probe, f"rule {rule_id} saved")


async def _opened_review(org: Org, **overrides: Any) -> dict[str, Any]:
    sent = await org.api.http.post("/v1/messages", json=draft(**overrides), headers=org.agent)
    assert sent.status_code == 202, sent.text
    review_id = sent.json()["review_id"]
    opened = await org.api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=org.human
    )
    assert opened.status_code == 200, opened.text
    return dict(opened.json())


async def _decide_with_rule(
    org: Org, headers: dict[str, str], review: dict[str, Any], new_rule: dict[str, Any]
) -> Any:
    return await org.api.http.post(
        f"/v1/reviews/{review['id']}/decision",
        json={
            "action": "reject",
            "revision": review["revision"],
            "version": review["version"],
            "feedback": "tighten it",
            "new_rule": new_rule,
        },
        headers=headers,
    )


async def test_a_decisions_new_rule_can_be_for_the_reviews_agent_and_names_its_decision_turn(
    api: Api,
) -> None:
    org = await Org.create(api)
    review = await _opened_review(org)
    wrong_agent = await _decide_with_rule(
        org, org.human, review, {"rule_text": "Sign off as Sam.", "scope_agent_id": "agt_someone_else"}
    )
    assert wrong_agent.status_code == 422 and wrong_agent.json()["code"] == "bad_request", wrong_agent.text
    decided = await _decide_with_rule(
        org, org.human, review, {"rule_text": "Sign off as Sam.", "scope_agent_id": org.agent_id}
    )
    assert decided.status_code == 200, decided.text
    [rule_id] = (await api.http.get(f"/v1/reviews/{review['id']}/feedback", headers=org.agent)).json()[
        "new_rules"
    ]
    rule = await _rule(api, org.agent, rule_id)
    assert (rule["rule_layer"], rule["scope"], rule["scope_agent_id"]) == ("project", "general", org.agent_id)
    turns = (await api.http.get(f"/v1/reviews/{review['id']}/turns", headers=org.agent)).json()["items"]
    [decision_turn] = [t for t in turns if t["turn_type"] == "decision"]
    assert rule["source_review_id"] == review["id"] and rule["source_turn_id"] == decision_turn["id"]
    # Another agent of the project does not compose under it.
    other = api.auth((await api.key(org.project_id, "agent"))["api_key"])
    theirs = (await api.http.get("/v1/rules", headers=other)).json()["items"]
    assert rule_id not in {r["id"] for r in theirs}


async def test_house_style_from_a_decision_takes_an_admin_key(api: Api) -> None:
    """A human's house-style rule is refused (403, nothing decided); an admin's is saved org-wide."""
    org = await Org.create(api)
    review = await _opened_review(org)
    house = {"rule_text": "Never use exclamation marks.", "rule_layer": "org"}
    refused = await _decide_with_rule(org, org.human, review, house)
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden_scope", refused.text
    assert "admin key" in refused.json()["detail"]
    unchanged = (await api.http.get(f"/v1/reviews/{review['id']}", headers=org.human)).json()
    assert (unchanged["state"], unchanged["version"]) == (review["state"], review["version"])
    decided = await _decide_with_rule(org, org.admin, review, house)
    assert decided.status_code == 200, decided.text
    [rule_id] = (await api.http.get(f"/v1/reviews/{review['id']}/feedback", headers=org.agent)).json()[
        "new_rules"
    ]
    rule = await _rule(api, org.agent, rule_id)
    assert (rule["rule_layer"], rule["scope"], rule.get("project_id")) == ("org", "general", None)


OTHER_AGENT = "agt_01ARZ3NDEKTSV4RRFFQ69G5FAV"  # well-formed, and no agent of the test's project


async def test_save_rule_takes_scope_agent_id_and_source_turn_id(api: Api) -> None:
    org, stranger = await Org.create(api), await Org.create(api)
    sent = await api.http.post("/v1/messages", json=draft(), headers=org.agent)
    review_id = sent.json()["review_id"]
    chat = await api.http.post(
        f"/v1/reviews/{review_id}/chat", json={"text": "Sam or Alex?"}, headers=org.agent
    )
    assert chat.status_code in (200, 201), chat.text
    turns = (await api.http.get(f"/v1/reviews/{review_id}/turns", headers=org.agent)).json()["items"]
    turn_id = turns[-1]["id"]
    body = {
        "rule_text": "Sign off as Alex.",
        "scope": "general",
        "scope_agent_id": org.agent_id,
        "source_review_id": review_id,
        "source_turn_id": turn_id,
    }
    saved = await api.http.post("/v1/rules", json=body, headers=org.agent)
    assert saved.status_code == 201, saved.text
    rule = saved.json()
    assert (rule["scope_agent_id"], rule["agent_id"], rule["source_turn_id"]) == (
        org.agent_id,
        org.agent_id,
        turn_id,
    )
    audit = (await api.http.get(f"/v1/rules/{rule['lineage_id']}/audit", headers=org.agent)).json()
    assert f'"source_turn_id":"{turn_id}"' in audit["items"][0]["after_json"]
    other = {**body, "rule_text": "Sign off with first name only."}
    for wrong, code, field in (
        ({**other, "source_turn_id": "turn_nope"}, 422, "/source_turn_id"),  # not a turn of the review
        ({**other, "source_review_id": ""}, 422, "/source_review_id"),  # a turn names its review
        ({**other, "scope_agent_id": OTHER_AGENT}, 403, None),  # an agent writes its own only
    ):
        answer = await api.http.post("/v1/rules", json=wrong, headers=org.agent)
        assert answer.status_code == code, answer.text
        if field:
            assert [e["field"] for e in answer.json()["errors"]] == [field], answer.text
    foreign = await api.http.post("/v1/rules", json={**body, "scope_agent_id": ""}, headers=stranger.agent)
    assert foreign.status_code == 404, foreign.text


async def test_promote_rule_to_house_style_takes_an_admin_key(api: Api) -> None:
    """project -> org: an admin key's (agent and human keys are 403 forbidden_scope, another org's 404);
    the lineage keeps its id, the audit shows the supersession, every project of the org inherits it."""
    from tests.gateway.test_mcp import mcp_client, structured

    org, stranger = await Org.create(api), await Org.create(api)
    rule = await org.save(org.agent, rule_text="Write dates as 3 March 2027.", scope="general")
    lineage = rule["lineage_id"]
    for headers in (org.agent, org.human):
        refused = await api.http.post(
            f"/v1/rules/{lineage}/promote", json={"rev": 1, "to_layer": "org"}, headers=headers
        )
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden_scope", refused.text
    foreign = await api.http.post(
        f"/v1/rules/{lineage}/promote", json={"rev": 1, "to_layer": "org"}, headers=stranger.admin
    )
    assert foreign.status_code == 404, foreign.text
    async with mcp_client(api, org.admin) as client:
        args = {"id": lineage, "rev": 1, "to_layer": "org", "client_id": "promote-org-1"}
        promoted = structured(await client.call_tool("promote_rule", args))
        replay = structured(await client.call_tool("promote_rule", args))
    assert replay["id"] == promoted["id"]
    assert (promoted["lineage_id"], promoted["rev"], promoted["rule_layer"], promoted["scope"]) == (
        lineage,
        2,
        "org",
        "general",
    )
    assert promoted.get("project_id") is None
    audit = (await api.http.get(f"/v1/rules/{lineage}/audit", headers=org.agent)).json()["items"]
    # The SDK's audit actor kinds: the console (an admin key) is a human acting.
    assert [(e["action"], e["actor_kind"]) for e in audit] == [("create", "agent"), ("supersede", "human")]
    # Another project of the same org composes under it now.
    sibling = await api.http.post(
        "/v1/admin/projects", json={"name": "sibling", "org_id": org.org_id}, headers=api.admin
    )
    assert sibling.status_code == 201, sibling.text
    sibling_agent = api.auth((await api.key(sibling.json()["project_id"], "agent"))["api_key"])
    ladder = (await api.http.get("/v1/rules", headers=sibling_agent)).json()["items"]
    assert [r["id"] for r in ladder if r["lineage_id"] == lineage] == [promoted["id"]]
    stale = await api.http.post(
        f"/v1/rules/{lineage}/promote", json={"rev": 2, "to_layer": "org"}, headers=org.admin
    )
    assert stale.status_code == 409 and stale.json()["code"] == "wrong_state", stale.text


async def _agent_category(org: Org, name: str) -> dict[str, Any]:
    made = await org.api.http.post(
        "/v1/categories", json={"name": name, "description": f"{name} mail"}, headers=org.agent
    )
    assert made.status_code == 201, made.text
    return dict(made.json())


async def test_merge_categories_moves_rules_and_drafts_and_rechecks_them(api: Api) -> None:
    from tests.gateway.test_mcp import mcp_client, structured

    org, stranger = await Org.create(api), await Org.create(api)
    keep, dup = await _agent_category(org, "Pilot follow-up"), await _agent_category(org, "Pilot followups")
    moving = await org.save(
        org.agent, rule_text="Quote the pilot start date.", scope="category", category_id=dup["id"]
    )
    await org.save(org.agent, rule_text="Keep it under 120 words.", scope="category", category_id=keep["id"])
    twin = await org.save(
        org.agent, rule_text="Keep it under 120 words.", scope="category", category_id=dup["id"]
    )
    sent = await api.http.post("/v1/messages", json=draft(category_id=dup["id"]), headers=org.agent)
    review_id = sent.json()["review_id"]
    args = {"id": dup["id"], "into_category_id": keep["id"], "rationale": "Same purpose: pilot follow-ups."}

    human = await api.http.post(
        f"/v1/categories/{dup['id']}/merge",
        json={"into_category_id": keep["id"], "rationale": "same"},
        headers=org.human,
    )
    assert human.status_code == 403 and human.json()["code"] == "forbidden_scope", human.text
    foreign = await api.http.post(
        f"/v1/categories/{dup['id']}/merge",
        json={"into_category_id": keep["id"], "rationale": "same"},
        headers=stranger.agent,
    )
    assert foreign.status_code == 404, foreign.text

    async with mcp_client(api, org.agent) as client:
        merged = structured(await client.call_tool("merge_categories", args | {"client_id": "merge-1"}))
        replay = structured(await client.call_tool("merge_categories", args | {"client_id": "merge-1"}))
    assert replay == merged
    assert merged["merged"]["merged_into"] == keep["id"] and merged["into"]["id"] == keep["id"]
    assert (merged["rules_moved"], merged["rules_retired"]) == (1, 1)

    # The rules: the moved lineage now governs the category that stays; its twin retired.
    kept = (await api.http.get("/v1/rules", params={"category_id": keep["id"]}, headers=org.agent)).json()
    assert sorted(r["rule_text"] for r in kept["items"] if r["scope"] == "category") == [
        "Keep it under 120 words.",
        "Quote the pilot start date.",
    ]
    moved = next(r for r in kept["items"] if r["lineage_id"] == moving["lineage_id"])
    assert (moved["rev"], moved["category_id"]) == (2, keep["id"])
    audit = (await api.http.get(f"/v1/rules/{moving['lineage_id']}/audit", headers=org.agent)).json()["items"]
    assert [e["action"] for e in audit] == ["create", "merge"]
    twin_history = (await api.http.get(f"/v1/rules/{twin['lineage_id']}/history", headers=org.agent)).json()
    assert twin_history["revisions"][-1]["status"] == "retired"

    # The draft moved, and its agent is asked to recheck it.
    async def recheck() -> dict[str, Any] | None:
        events = await events_until(api, org.agent, 1, timeout_s=0)
        return next(
            (e for e in events if e["reason"] == "recheck_category" and e.get("review_id") == review_id), None
        )

    nudge = await _eventually(recheck, "the merged draft's recheck_category")
    assert nudge["payload"] | {"state": None} == {
        "category_id": keep["id"],
        "state": None,
        "reason": "merged",
        "merged_from": dup["id"],
    }
    review = (await api.http.get(f"/v1/reviews/{review_id}", headers=org.agent)).json()
    assert review["category_id"] == keep["id"]

    # The merged category is retired: not listed, its state readable, nothing more lands in it.
    listed = (await api.http.get("/v1/categories", headers=org.agent)).json()["items"]
    assert dup["id"] not in {c["id"] for c in listed}
    assert (await api.http.get(f"/v1/categories/{dup['id']}", headers=org.agent)).json()[
        "merged_into"
    ] == keep["id"]
    late = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Too late.", "scope": "category", "category_id": dup["id"]},
        headers=org.agent,
    )
    assert late.status_code == 409 and late.json()["code"] == "conflict", late.text
    newcomer = await api.http.post("/v1/messages", json=draft(category_id=dup["id"]), headers=org.agent)
    assert newcomer.status_code == 409 and newcomer.json()["code"] == "conflict", newcomer.text
    hints = {e["field"]: e["detail"] for e in newcomer.json()["errors"]}
    assert hints["merged_into"] == keep["id"]  # follow merged_into
    # Repeating the merge answers it again; merging the survivor into the retired one is a conflict.
    again = await api.http.post(
        f"/v1/categories/{dup['id']}/merge",
        json={"into_category_id": keep["id"], "rationale": "again"},
        headers=org.agent,
    )
    assert again.status_code == 200 and again.json()["merged"]["merged_into"] == keep["id"], again.text
    backwards = await api.http.post(
        f"/v1/categories/{keep['id']}/merge",
        json={"into_category_id": dup["id"], "rationale": "backwards"},
        headers=org.agent,
    )
    assert backwards.status_code == 409 and backwards.json()["code"] == "conflict", backwards.text


async def test_an_agent_cannot_merge_a_human_curated_category(api: Api) -> None:
    org = await Org.create(api)
    curated, mine = await org.category("Curated"), await _agent_category(org, "Mine")
    body = {"into_category_id": curated["id"], "rationale": "same purpose"}
    refused = await api.http.post(f"/v1/categories/{mine['id']}/merge", json=body, headers=org.agent)
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden_scope", refused.text
    assert (await api.http.get(f"/v1/categories/{mine['id']}", headers=org.agent)).json().get(
        "merged_into"
    ) is None
    done = await api.http.post(f"/v1/categories/{mine['id']}/merge", json=body, headers=org.admin)
    assert done.status_code == 200 and done.json()["merged"]["merged_into"] == curated["id"], done.text
    same = await api.http.post(
        f"/v1/categories/{curated['id']}/merge",
        json={"into_category_id": curated["id"], "rationale": "x"},
        headers=org.admin,
    )
    assert same.status_code == 422 and same.json()["code"] == "bad_request", same.text


async def test_the_console_promotes_a_project_rule_to_house_style(api: Api) -> None:
    """The console route (the bootstrap token or an admin key of the org; never an agent's key)."""
    org, stranger = await Org.create(api), await Org.create(api)
    rule = await org.save(org.agent, rule_text="Spell the product name in lower case.", scope="general")
    route = f"/v1/admin/rules/{rule['lineage_id']}/promote"
    agent = await api.http.post(route, json={"rev": 1, "to_layer": "org"}, headers=org.agent)
    assert agent.status_code == 403 and agent.json()["code"] == "forbidden_scope", agent.text
    foreign = await api.http.post(route, json={"rev": 1, "to_layer": "org"}, headers=stranger.admin)
    assert foreign.status_code == 404, foreign.text
    promoted = await api.http.post(route, json={"rev": 1, "to_layer": "org"}, headers=api.admin)
    assert promoted.status_code == 200, promoted.text
    assert (promoted.json()["rule_layer"], promoted.json()["rev"]) == ("org", 2)
    history = (await api.http.get(f"/v1/rules/{rule['lineage_id']}/history", headers=org.agent)).json()
    assert [(r["action"], r["rule_layer"]) for r in history["revisions"]] == [
        ("created", "project"),
        ("promoted", "org"),
    ]


async def test_a_merge_keeps_its_rationale_in_an_audit_and_an_agent_stays_within_the_limits(api: Api) -> None:
    org, stranger = await Org.create(api), await Org.create(api)
    keep, dup = (
        await _agent_category(org, "Renewal reminder"),
        await _agent_category(org, "Renewal reminders"),
    )
    other = await _agent_category(org, "Renewal nudges")
    # Governed differently (a quorum on one): the catalog leaves that merge to a human.
    dial = await api.http.put(
        f"/v1/admin/projects/{org.project_id}/risk-dial",
        json={"categories": [{"category_id": other["id"], "quorum_approvals": 2}]},
        headers=org.admin,
    )
    assert dial.status_code == 200, dial.text
    refused = await api.http.post(
        f"/v1/categories/{other['id']}/merge",
        json={"into_category_id": keep["id"], "rationale": "same purpose"},
        headers=org.agent,
    )
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden_scope", refused.text
    assert "governed differently (quorum_approvals)" in refused.json()["detail"]
    assert {"field": "reason", "code": "forbidden_scope", "detail": "policy_differs"} in refused.json()[
        "errors"
    ]

    rationale = "Both remind a customer that a renewal is due."
    merged = await api.http.post(
        f"/v1/categories/{dup['id']}/merge",
        json={"into_category_id": keep["id"], "rationale": rationale},
        headers=org.agent,
    )
    assert merged.status_code == 200, merged.text
    entry = merged.json()["audit"]
    assert entry["id"].startswith("cmg_") and entry["created_at"]
    assert (entry["merged_from"], entry["merged_into"], entry["rationale"]) == (
        dup["id"],
        keep["id"],
        rationale,
    )
    assert (entry["actor_kind"], entry["entity_kind"], entry["action"]) == ("agent", "category", "merge")
    assert (entry["rules_moved"], entry["rules_retired"]) == (0, 0)
    for side in (dup["id"], keep["id"]):
        audit = await api.http.get(f"/v1/categories/{side}/audit", headers=org.human)
        assert audit.status_code == 200, audit.text
        assert audit.json() == {"items": [entry], "total": 1}
    assert (await api.http.get(f"/v1/categories/{other['id']}/audit", headers=org.agent)).json()[
        "items"
    ] == []
    foreign = await api.http.get(f"/v1/categories/{keep['id']}/audit", headers=stranger.agent)
    assert foreign.status_code == 404, foreign.text
