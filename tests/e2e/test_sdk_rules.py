"""The SDK's rule and category calls through the gateway (issue 15, SDK.md #16-18): a save naming
``supersedes_id`` (a stale one is 409 with nothing written), ``propose_graduation`` with ``evidence``
answered by a ``GraduationStatus``, ``updated_at`` and ``created_by_agent_id``, ``author_kind`` as
``agent | human``, and the ``recheck_category`` broadcasts of a rename and a merge. REST and MCP."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.e2e.helpers import events_until
from tests.e2e.test_rules import GRADUATION_KEYS, Org
from tests.gateway.test_mcp import mcp_client, structured


async def _history(api: Api, org: Org, lineage_id: str) -> list[dict[str, Any]]:
    reply = await api.http.get(f"/v1/rules/{lineage_id}/history", headers=org.agent)
    assert reply.status_code == 200, reply.text
    return list(reply.json()["revisions"])


async def test_a_save_naming_supersedes_id_revises_and_a_stale_one_is_409_with_nothing_written(
    api: Api,
) -> None:
    org, stranger = await Org.create(api), await Org.create(api)
    first = await org.save(org.agent, rule_text="Always propose a concrete time.")
    second = await org.save(org.agent, rule_text="Propose two concrete times.", supersedes_id=first["id"])
    assert (second["lineage_id"], second["rev"], second["supersedes_id"]) == (
        first["lineage_id"],
        2,
        first["id"],
    )
    assert second["created_at"] == second["updated_at"]
    [was, now] = await _history(api, org, first["lineage_id"])
    assert (was["status"], was["updated_at"], now["status"]) == ("superseded", second["created_at"], "active")

    stale = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Propose three times.", "supersedes_id": first["id"]},
        headers=org.agent,
    )
    assert stale.status_code == 409 and stale.json()["code"] == "stale", stale.text
    hints = {e["field"]: e["code"] for e in stale.json()["errors"]}
    assert (hints["revision"], hints["state"]) == ("2", "active")
    assert [r["id"] for r in await _history(api, org, first["lineage_id"])] == [first["id"], second["id"]]
    rules = (await api.http.get("/v1/rules", headers=org.agent)).json()["items"]
    assert [r["rule_text"] for r in rules] == ["Propose two concrete times."]

    # Both ways at once must name the same revision; another project's rule is not found.
    other = await org.save(org.agent, rule_text="Keep it under 120 words.")
    disagree = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Three times.", "supersedes_id": second["id"], "lineage_id": other["lineage_id"]},
        headers=org.agent,
    )
    assert disagree.status_code == 422 and disagree.json()["errors"][0]["field"] == "/supersedes_id"
    agree = await org.save(
        org.agent, rule_text="Propose three times.", supersedes_id=second["id"],
        lineage_id=second["lineage_id"], expected_rev=2,
    )  # fmt: skip
    assert agree["rev"] == 3
    foreign = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Propose four times.", "supersedes_id": agree["id"]},
        headers=stranger.agent,
    )
    assert foreign.status_code == 404, foreign.text

    # The catalog's save_rule takes supersedes_id too, with client_id as its key.
    async with mcp_client(api, org.agent) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert "supersedes_id" in tools["save_rule"].input_schema["properties"]
        saved = structured(
            await client.call_tool(
                "save_rule",
                {"rule_text": "Propose four times.", "supersedes_id": agree["id"], "client_id": "s-1"},
            )
        )
        assert (saved["rev"], saved["supersedes_id"]) == (4, agree["id"])
        replay = structured(
            await client.call_tool(
                "save_rule",
                {"rule_text": "Propose four times.", "supersedes_id": agree["id"], "client_id": "s-1"},
            )
        )
        assert replay["id"] == saved["id"]  # a retry with its key, not a stale


async def test_propose_graduation_takes_evidence_and_answers_the_graduation_status(api: Api) -> None:
    org = await Org.create(api)
    category = await org.category("Renewals")
    proposals = f"/v1/categories/{category['id']}/graduation-proposals"
    evidence = {"approvals": 20, "last_edits": 0, "notes": ["clean for weeks"]}
    keyed = {**org.agent, "Idempotency-Key": "grad-1"}
    made = await api.http.post(proposals, json={"evidence": evidence}, headers=keyed)
    assert made.status_code == 201, made.text
    retried = await api.http.post(proposals, json={"evidence": evidence}, headers=keyed)
    assert retried.status_code == 201, retried.text  # the same proposal, not a second (listed below)
    reused = await api.http.post(proposals, json={"evidence": {"approvals": 1}}, headers=keyed)
    assert reused.status_code == 409 and reused.json()["code"] == "idempotency_conflict", reused.text
    assert set(made.json()) == GRADUATION_KEYS
    assert (made.json()["category_id"], made.json()["next_state"]) == (category["id"], "auto_notify")
    # The spec's {to_state, note} keep working beside it; the proposals carry what the agent gave.
    ours = await api.http.post(
        proposals, json={"to_state": "auto_notify", "note": "and now?"}, headers=org.agent
    )
    assert ours.status_code == 201 and set(ours.json()) == GRADUATION_KEYS
    listed = (await api.http.get(proposals, headers=org.agent)).json()["proposals"]
    assert [(p["note"], p["evidence"]) for p in listed] == [("and now?", None), ("", evidence)]
    queue = await api.http.get(f"/v1/admin/projects/{org.project_id}/graduation-proposals", headers=org.admin)
    assert [p["evidence"] for p in queue.json()["proposals"]] == [None, evidence]

    bad = await api.http.post(proposals, json={"evidence": ["not", "an", "object"]}, headers=org.agent)
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"].startswith("/evidence"), bad.text
    assert len((await api.http.get(proposals, headers=org.agent)).json()["proposals"]) == 2

    async with mcp_client(api, org.agent) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        tool = tools["propose_graduation"]
        assert "evidence" in tool.input_schema["properties"]
        assert tool.output_schema is not None and set(tool.output_schema["properties"]) == GRADUATION_KEYS
        status = structured(
            await client.call_tool("propose_graduation", {"id": category["id"], "evidence": {}})
        )
        assert status["category_id"] == category["id"]


async def test_categories_and_rules_serve_the_sdks_timestamps_and_author_kinds(api: Api) -> None:
    org = await Org.create(api)
    made = await api.http.post("/v1/categories", json={"name": "Renewals"}, headers=org.agent)
    assert made.status_code == 201, made.text
    category = made.json()
    assert (category["author_kind"], category["created_by_agent_id"]) == ("agent", org.agent_id)
    assert category["updated_at"] == category["created_at"]
    predefined = await org.category("Legal")
    assert predefined["author_kind"] == "human" and "created_by_agent_id" not in predefined
    renamed = await api.http.patch(
        f"/v1/categories/{category['id']}", json={"name": "Contract renewals"}, headers=org.agent
    )
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["updated_at"] > category["updated_at"]
    assert renamed.json()["created_at"] == category["created_at"]

    admins = await org.save(org.admin, rule_text="Sign every email with the company name.")
    assert admins["author_kind"] == "human"  # the console is a human acting
    reviewer = api.auth((await api.key(org.project_id, "review_agent"))["api_key"])
    reviewers = await org.save(reviewer, rule_text="Never promise a discount.")
    assert reviewers["author_kind"] == "agent"  # a review agent is an agent, never a human
    history = await _history(api, org, reviewers["lineage_id"])
    assert history[0]["changed_by_kind"] == "review_agent"  # the exact kind stays in the audit
    audit = (await api.http.get(f"/v1/rules/{admins['lineage_id']}/audit", headers=org.agent)).json()
    assert audit["items"][0]["actor_kind"] == "human"  # the SDK's audit actor kinds
    document = (await api.http.get("/openapi.json")).json()["components"]["schemas"]
    for shape in ("Rule", "Category"):
        assert document[shape]["properties"]["author_kind"]["enum"] == ["agent", "human"], shape


async def test_a_rename_and_a_merge_reach_every_agent_as_recheck_category_broadcasts(api: Api) -> None:
    org = await Org.create(api)
    other_agent = api.auth((await api.key(org.project_id))["api_key"])

    async def propose(name: str) -> dict[str, Any]:
        made = await api.http.post("/v1/categories", json={"name": name}, headers=org.agent)
        assert made.status_code == 201, made.text
        return dict(made.json())

    kept, dup = await propose("Renewals"), await propose("Renewal reminders")
    renamed = await api.http.patch(
        f"/v1/categories/{kept['id']}", json={"name": "Contract renewals"}, headers=org.agent
    )
    assert renamed.status_code == 200, renamed.text
    merged = await api.http.post(
        f"/v1/categories/{dup['id']}/merge",
        json={"into_category_id": kept["id"], "rationale": "both are renewal reminders"},
        headers=org.agent,
    )
    assert merged.status_code == 200, merged.text
    for agent in (org.agent, other_agent):  # an agent with no draft pending hears of both
        seen = [e for e in await events_until(api, agent, 2) if e["seq"] == 0]
        assert [(e["reason"], e["category_id"], e["payload"]) for e in seen] == [
            ("recheck_category", kept["id"],
             {"category_id": kept["id"], "state": "supervised", "reason": "renamed", "name": "Contract renewals"}),
            ("recheck_category", dup["id"],
             {"category_id": dup["id"], "state": "supervised", "reason": "merged", "into_category_id": kept["id"]}),
        ]  # fmt: skip
        assert all("review_id" not in e for e in seen)
        acked = await api.http.post(
            "/v1/review-events/ack", json={"broadcast_ids": [e["id"] for e in seen]}, headers=agent
        )
        assert acked.status_code == 200 and acked.json()["acked"] == 2, acked.text
