"""The rules context through the gateway and real processes: the spec's JSON shapes, the ladder,
guardrails, staged approval, undo, console authority, graduation, the risk dial, tokens, outbox."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import orjson
from reviewloop.common.v1 import common_pb2
from reviewloop.ids import new_id
from reviewloop.rules.v1 import rules_pb2, rules_pb2_grpc
from reviewloop.storage import make_engine
from reviewloop.storage.schema import OUTBOX
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import select

from tests.conftest import Api

# The canonical example JSON of spec 000, whose keys the gateway must answer with exactly.
RULE_KEYS = {
    "id", "lineage_id", "rev", "rule_layer", "org_id", "project_id", "scope", "category_id", "kind",
    "priority", "rule_text", "source_review_id", "author_kind", "status", "created_at", "updated_at",
}  # fmt: skip
CATEGORY_KEYS = {
    "id", "name", "description", "scope", "state", "author_kind", "rule_high_water", "rules_version",
    "never_graduate", "clean_approval_count", "drift_count", "created_at", "updated_at",
}  # fmt: skip
GRADUATION_KEYS = {
    "category_id", "state", "next_state", "never_graduate", "clean_approval_count",
    "graduate_min_approvals", "approvals_met", "age_hours", "graduate_min_age_hours", "age_met",
    "maturity_gate_met", "drift_count", "drift_demote_after", "can_graduate",
}  # fmt: skip
DIAL_KEYS = {
    "min_confidence", "first_contact_gate", "drift_demote_after", "canary_rate", "graduate_min_approvals",
    "graduate_min_age_hours", "auto_send_cap_per_day", "quorum_approvals", "quorum_review_agent",
    "review_deadline_minutes",
    "quorum_panel",
}  # fmt: skip


class Org:
    """A project with an agent, a human and an admin key."""

    def __init__(self, api: Api, project: dict[str, Any], keys: dict[str, dict[str, Any]]) -> None:
        self.api = api
        self.org_id, self.project_id = project["org_id"], project["project_id"]
        self.agent_id = keys["agent"]["agent_id"]
        self.agent = api.auth(keys["agent"]["api_key"])
        self.human = api.auth(keys["human"]["api_key"])
        self.admin = api.auth(keys["admin"]["api_key"])

    @classmethod
    async def create(cls, api: Api) -> Org:
        project = await api.project()
        keys = {kind: await api.key(project["project_id"], kind) for kind in ("agent", "human", "admin")}
        return cls(api, project, keys)

    async def category(self, name: str = "Sales Outreach", **extra: Any) -> dict[str, Any]:
        made = await self.api.http.post(
            f"/v1/admin/projects/{self.project_id}/categories",
            json={"name": name, "description": "cold outbound to prospects about the pilot", **extra},
            headers=self.admin,
        )
        assert made.status_code == 201, made.text
        return dict(made.json())

    async def save(self, headers: dict[str, str], **body: Any) -> dict[str, Any]:
        saved = await self.api.http.post("/v1/rules", json=body, headers=headers)
        assert saved.status_code == 201, saved.text
        return dict(saved.json())


def _rules_stub(api: Api) -> rules_pb2_grpc.RulesServiceStub:
    return rules_pb2_grpc.RulesServiceStub(grpc.aio.insecure_channel(api.stack.address("rules")))


async def test_shapes_match_the_spec_examples_exactly(api: Api) -> None:
    org = await Org.create(api)
    category = await org.category()
    assert set(category) == CATEGORY_KEYS
    assert (category["scope"], category["state"], category["author_kind"]) == (
        "org_shared",
        "supervised",
        "human",
    )

    rule = await org.save(
        org.human,
        rule_text="Always propose a concrete time, never 'let me know'.",
        scope="category",
        category_id=category["id"],
        source_review_id=new_id("rr"),
    )
    assert set(rule) == RULE_KEYS
    assert (rule["rev"], rule["rule_layer"], rule["kind"], rule["priority"]) == (1, "project", "soft", 0)
    assert (rule["author_kind"], rule["status"]) == ("human", "active")
    assert rule["id"].startswith("rule_") and rule["lineage_id"].startswith("rln_")

    status = (await api.http.get(f"/v1/categories/{category['id']}/graduation", headers=org.agent)).json()
    assert set(status) == GRADUATION_KEYS
    assert (status["state"], status["next_state"], status["graduate_min_age_hours"]) == (
        "supervised",
        "auto_notify",
        48,
    )

    put = await api.http.put(
        f"/v1/admin/projects/{org.project_id}/risk-dial",
        json={
            "categories": [
                {"category_id": category["id"], "min_confidence": 0.85, "first_contact_gate": None}
            ]
        },
        headers=org.admin,
    )
    assert put.status_code == 200, put.text
    dial = (await api.http.get("/v1/risk-dial", headers=org.agent)).json()
    assert dial == {
        "account": {
            "min_confidence": 0.7,
            "first_contact_gate": True,
            "drift_demote_after": 3,
            "canary_rate": 0.1,
            "graduate_min_approvals": 20,
            "graduate_min_age_hours": 48,
            "auto_send_cap_per_day": 200,
            "quorum_approvals": 1,
            "quorum_review_agent": False,
            "review_deadline_minutes": 0,
            "quorum_panel": 0,
        },
        "categories": [
            {
                "category_id": category["id"],
                # every override field, a value or null (the SDK's CategoryRiskDial)
                **dict.fromkeys(DIAL_KEYS),
                "min_confidence": 0.85,
                "effective": {
                    "min_confidence": 0.85,
                    "first_contact_gate": True,
                    "drift_demote_after": 3,
                    "canary_rate": 0.1,
                    "graduate_min_approvals": 20,
                    "graduate_min_age_hours": 48,
                    "auto_send_cap_per_day": 200,
                    "quorum_approvals": 1,
                    "quorum_review_agent": False,
                    "review_deadline_minutes": 0,
                    "quorum_panel": 0,
                },
            }
        ],
    }
    assert set(dial["categories"][0]["effective"]) == DIAL_KEYS


async def test_get_rules_returns_the_ordered_ladder_and_a_token_only_when_unfiltered(api: Api) -> None:
    org = await Org.create(api)
    category = await org.category()
    house = await api.http.post(
        f"/v1/admin/orgs/{org.org_id}/rules",
        json={"rule_text": "Sign every email with the company name."},
        headers=org.admin,
    )
    assert house.status_code == 201, house.text
    assert house.json()["rule_layer"] == "org" and "project_id" not in house.json()
    general = await org.save(org.agent, rule_text="Never use exclamation marks.")
    in_category = await org.save(
        org.agent, rule_text="Always propose a concrete time.", category_id=category["id"]
    )
    mine = await org.save(org.agent, rule_text="Open with the first name.", agent_id=org.agent_id)
    assert mine["agent_id"] == org.agent_id

    stack = (
        await api.http.get("/v1/rules", params={"category_id": category["id"]}, headers=org.agent)
    ).json()
    assert [r["id"] for r in stack["items"]] == [
        mine["id"],
        in_category["id"],
        general["id"],
        house.json()["id"],
    ]
    assert (stack["house_style_version"], stack["category_rules_version"]) == (1, 1)
    assert stack["rule_high_water"] >= 1 and stack["composition_token"].startswith("ct1.")
    assert stack["composition_token_expires_at"].endswith("Z") and "next_cursor" not in stack

    browsing = (await api.http.get("/v1/rules", params={"scope": "general"}, headers=org.agent)).json()
    assert "composition_token" not in browsing
    assert {r["scope"] for r in browsing["items"]} == {"general"}


async def test_revisions_are_append_only_with_stale_duplicate_and_credential_refusals(api: Api) -> None:
    org = await Org.create(api)
    first = await org.save(org.agent, rule_text="Keep emails under 150 words.")
    body = {"rule_text": "Keep emails under 100 words.", "lineage_id": first["lineage_id"], "expected_rev": 1}
    outcomes = await asyncio.gather(
        *(api.http.post("/v1/rules", json=body, headers=org.agent) for _ in range(3))
    )
    assert sorted(r.status_code for r in outcomes) == [201, 409, 409]
    refused = next(r for r in outcomes if r.status_code == 409)
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "stale"
    assert {"field": "revision", "code": "2", "detail": "2"} in refused.json()["errors"]

    twin = await api.http.post(
        "/v1/rules", json={"rule_text": "keep emails under 100 WORDS"}, headers=org.agent
    )
    assert twin.status_code == 409 and twin.json()["code"] == "conflict"
    assert first["lineage_id"] in twin.json()["detail"]

    secret = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Log in to the CRM with password: hunter2hunter2 first."},
        headers=org.agent,
    )
    assert secret.status_code == 422 and "hunter2" not in secret.text
    assert "password" in secret.json()["detail"]
    lint = await api.http.post("/v1/rules", json={"rule_text": "TODO"}, headers=org.agent)
    assert lint.status_code == 422 and lint.json()["code"] == "bad_request"

    history = (await api.http.get(f"/v1/rules/{first['lineage_id']}/history", headers=org.agent)).json()
    assert [(r["rev"], r["status"], r["action"]) for r in history["revisions"]] == [
        (1, "superseded", "created"),
        (2, "active", "revised"),
    ]
    stack = (await api.http.get("/v1/rules", headers=org.agent)).json()
    assert [r["rule_text"] for r in stack["items"]] == ["Keep emails under 100 words."]


async def test_agents_get_403_on_every_console_verb_and_other_orgs_get_404(api: Api) -> None:
    org, stranger = await Org.create(api), await Org.create(api)
    category = await org.category()
    rule = await org.save(org.human, rule_text="Keep emails under 150 words.")
    console = [
        ("post", f"/v1/admin/orgs/{org.org_id}/rules", {"rule_text": "Sign as the CEO of the company."}),
        ("post", f"/v1/admin/projects/{org.project_id}/categories", {"name": "Mine"}),
        ("post", f"/v1/admin/categories/{category['id']}/graduate", {"to_state": "auto_notify"}),
        ("put", f"/v1/admin/projects/{org.project_id}/risk-dial", {"account": {"canary_rate": 1}}),
        ("put", f"/v1/admin/projects/{org.project_id}/rule-settings", {"write_approval": False}),
        ("post", f"/v1/admin/rules/{rule['lineage_id']}/undo", {"rev": 1}),
        ("post", f"/v1/admin/rules/{rule['lineage_id']}/approve", {"rev": 1}),
        ("patch", f"/v1/admin/categories/{category['id']}", {"never_graduate": False}),
    ]
    for method, path, body in console:
        for who in (org.agent, org.human):
            refused = await api.http.request(method, path, json=body, headers=who)
            assert refused.status_code == 403, (path, refused.text)
            assert refused.json()["code"] == "forbidden_scope"
        foreign = await api.http.request(method, path, json=body, headers=stranger.admin)
        assert foreign.status_code == 404, (path, foreign.text)
    # Nothing moved.
    assert (await api.http.get(f"/v1/categories/{category['id']}/graduation", headers=org.agent)).json()[
        "state"
    ] == "supervised"
    # An agent-plane save never writes house style.
    assert (
        await api.http.post("/v1/rules", json={"rule_text": "x" * 20, "rule_layer": "org"}, headers=org.agent)
    ).status_code == 422
    assert (
        await api.http.get(f"/v1/rules/{rule['lineage_id']}/history", headers=stranger.agent)
    ).status_code == 404


async def test_staged_approval_and_console_undo(api: Api) -> None:
    org = await Org.create(api)
    on = await api.http.put(
        f"/v1/admin/projects/{org.project_id}/rule-settings", json={"write_approval": True}, headers=api.admin
    )
    assert on.json() == {"project_id": org.project_id, "write_approval": True}
    before = (await api.http.get("/v1/rules", headers=org.agent)).json()
    proposed = await org.save(org.agent, rule_text="Always propose a concrete time.")
    assert proposed["status"] == "proposed" and proposed["author_kind"] == "agent"
    after = (await api.http.get("/v1/rules", headers=org.agent)).json()
    assert after["items"] == [] and after["rule_high_water"] == before["rule_high_water"]
    pending = (await api.http.get("/v1/rules", params={"status": "proposed"}, headers=org.human)).json()
    assert [r["id"] for r in pending["items"]] == [proposed["id"]]

    approved = await api.http.post(
        f"/v1/admin/rules/{proposed['lineage_id']}/approve", json={"rev": 1}, headers=org.admin
    )
    assert approved.status_code == 200, approved.text
    assert (approved.json()["status"], approved.json()["rev"]) == ("active", 2)
    stack = (await api.http.get("/v1/rules", headers=org.agent)).json()
    assert [r["rule_text"] for r in stack["items"]] == ["Always propose a concrete time."]
    assert stack["rule_high_water"] > after["rule_high_water"]

    undone = await api.http.post(
        f"/v1/admin/rules/{proposed['lineage_id']}/undo", json={"rev": 2}, headers=api.admin
    )
    assert undone.status_code == 200, undone.text
    assert undone.json()["status"] == "retired"
    again = await api.http.post(
        f"/v1/admin/rules/{proposed['lineage_id']}/undo", json={"rev": 2}, headers=org.admin
    )
    assert again.status_code == 409 and again.json()["code"] == "stale"
    history = (await api.http.get(f"/v1/rules/{proposed['lineage_id']}/history", headers=org.human)).json()
    assert [(r["action"], r["changed_by_kind"]) for r in history["revisions"]] == [
        ("created", "agent"),
        ("approved", "admin"),
        ("undone", "admin"),
    ]


async def test_graduation_is_proposed_by_agents_and_flipped_by_the_console(api: Api) -> None:
    org = await Org.create(api)
    agent_made = await api.http.post("/v1/categories", json={"name": "Renewals"}, headers=org.agent)
    assert agent_made.status_code == 201 and agent_made.json()["author_kind"] == "agent"
    category = agent_made.json()
    listed = (await api.http.get("/v1/categories", headers=org.agent)).json()
    assert [c["id"] for c in listed["items"]] == [category["id"]] and "next_cursor" not in listed

    proposals = f"/v1/categories/{category['id']}/graduation-proposals"
    proposal = await api.http.post(proposals, json={"note": "clean for weeks"}, headers=org.agent)
    assert proposal.status_code == 201, proposal.text
    # The SDK's answer: the category's graduation status (the proposal is read from the list).
    assert (proposal.json()["category_id"], proposal.json()["next_state"]) == (category["id"], "auto_notify")
    [mine] = (await api.http.get(proposals, headers=org.agent)).json()["proposals"]
    assert (mine["to_state"], mine["status"]) == ("auto_notify", "proposed")
    queue = f"/v1/admin/projects/{org.project_id}/graduation-proposals"
    waiting = (await api.http.get(queue, headers=org.admin)).json()["proposals"]
    assert [(p["id"], p["from_state"], p["note"]) for p in waiting] == [
        (mine["id"], "supervised", "clean for weeks")
    ]
    assert (await api.http.get(queue, headers=org.agent)).json()["code"] == "forbidden_scope"
    graduate = f"/v1/admin/categories/{category['id']}/graduate"
    # The maturity gate holds every rung: no clean approvals yet, so can_graduate is false and the
    # human's graduate is refused (the spec's canonical status).
    status = (await api.http.get(f"/v1/categories/{category['id']}/graduation", headers=org.agent)).json()
    assert (status["next_state"], status["maturity_gate_met"], status["can_graduate"]) == (
        "auto_notify",
        False,
        False,
    )
    early = await api.http.post(graduate, json={"to_state": "auto_notify"}, headers=api.admin)
    assert early.status_code == 409 and early.json()["code"] == "maturity_gate_unmet", early.text
    dial = f"/v1/admin/projects/{org.project_id}/risk-dial"
    gate_open = {"graduate_min_approvals": 0, "graduate_min_age_hours": 0}
    assert (await api.http.put(dial, json={"account": gate_open}, headers=org.admin)).status_code == 200
    status = (await api.http.get(f"/v1/categories/{category['id']}/graduation", headers=org.agent)).json()
    assert status["can_graduate"] is True
    flipped = await api.http.post(graduate, json={"to_state": "auto_notify"}, headers=api.admin)
    assert flipped.status_code == 200 and flipped.json()["state"] == "auto_notify"
    assert (await api.http.get(queue, headers=org.admin)).json()["proposals"] == []
    gate_shut = {"graduate_min_approvals": 5}
    assert (await api.http.put(dial, json={"account": gate_shut}, headers=org.admin)).status_code == 200
    gate = await api.http.post(graduate, json={"to_state": "auto_silent"}, headers=org.admin)
    assert gate.status_code == 409 and gate.json()["code"] == "maturity_gate_unmet"

    locked = await org.category("Legal", never_graduate=True)
    refused = await api.http.post(
        f"/v1/admin/categories/{locked['id']}/graduate", json={"to_state": "auto_notify"}, headers=org.admin
    )
    assert refused.status_code == 409 and refused.json()["code"] == "graduation_locked"
    status = (await api.http.get(f"/v1/categories/{locked['id']}/graduation", headers=org.agent)).json()
    assert (status["never_graduate"], status["can_graduate"]) == (True, False)


async def test_a_human_rejects_a_graduation_proposal_and_the_agent_reads_why(api: Api) -> None:
    org, stranger = await Org.create(api), await Org.create(api)
    category = await org.category("Renewals")
    proposals = f"/v1/categories/{category['id']}/graduation-proposals"
    made = await api.http.post(proposals, json={"note": "clean for weeks"}, headers=org.agent)
    assert made.status_code == 201, made.text
    [proposal] = (await api.http.get(proposals, headers=org.agent)).json()["proposals"]
    reject = f"/v1/admin/projects/{org.project_id}/graduation-proposals/{proposal['id']}/reject"
    why = {"reason": "Not before the Q3 pricing change ships."}
    assert (await api.http.post(reject, json=why, headers=org.agent)).status_code == 403
    elsewhere = reject.replace(org.project_id, stranger.project_id)
    assert (await api.http.post(elsewhere, json=why, headers=stranger.admin)).status_code == 404
    empty = await api.http.post(reject, json={"reason": ""}, headers=org.admin)
    assert empty.status_code == 422 and empty.json()["errors"][0]["field"] == "/reason", empty.text

    rejected = await api.http.post(reject, json=why, headers={**org.admin, "Idempotency-Key": "rej-1"})
    assert rejected.status_code == 200, rejected.text
    assert (rejected.json()["status"], rejected.json()["reason"]) == ("rejected", why["reason"])
    replayed = await api.http.post(reject, json=why, headers={**org.admin, "Idempotency-Key": "rej-1"})
    assert replayed.status_code == 200 and replayed.json() == rejected.json()  # a retry, not a 409
    again = await api.http.post(reject, json=why, headers=org.admin)
    assert again.status_code == 409 and again.json()["code"] == "wrong_state", again.text
    queue = f"/v1/admin/projects/{org.project_id}/graduation-proposals"
    assert (await api.http.get(queue, headers=org.admin)).json()["proposals"] == []
    # The agent reads the decision, with the reason verbatim; the category stays on its rung.
    seen = (await api.http.get(proposals, headers=org.agent)).json()["proposals"]
    assert [(p["id"], p["status"], p["reason"]) for p in seen] == [
        (proposal["id"], "rejected", why["reason"])
    ]
    assert seen[0]["decided_at"] and seen[0]["decided_by"]
    status = (await api.http.get(f"/v1/categories/{category['id']}/graduation", headers=org.agent)).json()
    assert status["state"] == "supervised"
    assert (await api.http.get(proposals, headers=stranger.agent)).status_code == 404


async def test_outcomes_over_grpc_demote_on_drift_once_per_event_and_reach_review_state(api: Api) -> None:
    org = await Org.create(api)
    category = await org.category()
    await api.http.put(
        f"/v1/admin/projects/{org.project_id}/risk-dial",
        json={"account": {"drift_demote_after": 1, "graduate_min_approvals": 0, "graduate_min_age_hours": 0}},
        headers=org.admin,
    )
    await api.http.post(
        f"/v1/admin/categories/{category['id']}/graduate", json={"to_state": "auto_notify"}, headers=org.admin
    )
    payload = {
        "review_id": new_id("rr"),
        "org_id": org.org_id,
        "project_id": org.project_id,
        "category_id": category["id"],
        "outcome": "clean_approval",
    }
    stub = _rules_stub(api)
    clean = common_pb2.Event(event_id=new_id("evt"), type="review_outcome", payload=orjson.dumps(payload))
    reply = await stub.Ingest(common_pb2.IngestRequest(events=[clean, clean]))
    assert (reply.accepted, reply.duplicates) == (1, 1)
    drift = common_pb2.Event(
        event_id=new_id("evt"), type="review_outcome", payload=orjson.dumps({**payload, "outcome": "drift"})
    )
    await stub.Ingest(common_pb2.IngestRequest(events=[drift]))
    status = (await api.http.get(f"/v1/categories/{category['id']}/graduation", headers=org.agent)).json()
    assert (status["state"], status["drift_count"], status["clean_approval_count"]) == ("supervised", 0, 0)

    # The rules outbox (rule_changed, category_changed to review_state; the broadcasts to nudge) is relayed.
    await org.save(org.agent, rule_text="Always propose a concrete time.")
    engine = make_engine(
        api.stack.env["REVIEWLOOP_RULES_DB"].replace("postgresql://", "postgresql+asyncpg://")
    )
    deadline = time.monotonic() + 15
    try:
        while True:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(select(OUTBOX.c.type, OUTBOX.c.delivered_at, OUTBOX.c.payload))
                ).all()
            mine = [r for r in rows if org.org_id in r.payload]
            if (mine and all(r.delivered_at for r in mine)) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    finally:
        await engine.dispose()
    # review_state's events, and the agents' broadcasts through nudge
    assert {r.type for r in mine} == {"category_changed", "rule_changed", "broadcast"}
    assert all(r.delivered_at is not None for r in mine)


async def test_composition_token_validates_over_grpc(api: Api) -> None:
    org = await Org.create(api)
    category, other = await org.category(), await org.category("Support")
    stack = (
        await api.http.get("/v1/rules", params={"category_id": category["id"]}, headers=org.agent)
    ).json()
    token = stack["composition_token"]
    agent = Principal(org.org_id, org.project_id, ActorKind.AGENT, org.agent_id).to_proto()
    stub = _rules_stub(api)

    async def check(tok: str = token) -> int:
        reply = await stub.ValidateCompositionToken(
            rules_pb2.ValidateCompositionTokenRequest(
                principal=agent, composition_token=tok, category_id=category["id"]
            )
        )
        return int(reply.status)

    assert await check() == rules_pb2.TOKEN_STATUS_VALID
    await org.save(org.human, rule_text="Answer within one business day.", category_id=other["id"])
    assert await check() == rules_pb2.TOKEN_STATUS_VALID
    assert await check(token[:-4] + "AAAA") == rules_pb2.TOKEN_STATUS_INVALID
    await org.save(org.human, rule_text="Always propose a concrete time.", category_id=category["id"])
    assert await check() == rules_pb2.TOKEN_STATUS_STALE


async def test_agents_retire_undo_and_rename_through_the_catalog_tools(api: Api) -> None:
    """The catalog's retire_rule / undo_rule_change / update_category on the agent plane (REST and MCP):
    an agent may retire or undo a project rule and rename a category; org house style, the never_graduate
    lock, and any retire under staged approval stay the console's; another project's is 404."""
    from tests.gateway.test_mcp import mcp_client, structured

    org, stranger = await Org.create(api), await Org.create(api)
    rule = await org.save(org.agent, rule_text="Always propose a concrete time.")
    lineage = rule["lineage_id"]
    async with mcp_client(api, org.agent) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        for name in ("retire_rule", "undo_rule_change", "update_category"):
            assert tools[name].output_schema is not None, name
        retired = structured(
            await client.call_tool("retire_rule", {"id": lineage, "rev": 1, "client_id": "r-1"})
        )
        assert (retired.get("status"), retired.get("rev")) == ("retired", 2), retired
        replay = structured(
            await client.call_tool("retire_rule", {"id": lineage, "rev": 1, "client_id": "r-1"})
        )
        assert replay["id"] == retired["id"]  # a retry with its key answers the revision it wrote
        stale = await client.call_tool("retire_rule", {"id": lineage, "rev": 1})
        assert stale.is_error and structured(stale)["code"] == "stale"
        restored = structured(await client.call_tool("undo_rule_change", {"id": lineage, "rev": 2}))
        assert (restored["status"], restored["rev"]) == ("active", 3)
        made = structured(await client.call_tool("propose_category", {"name": "Renewals"}))
        renamed = structured(
            await client.call_tool("update_category", {"id": made["id"], "name": "Renewal reminders"})
        )
        assert (renamed["id"], renamed["name"]) == (made["id"], "Renewal reminders")
    stack = (await api.http.get("/v1/rules", headers=org.agent)).json()
    assert [r["rule_text"] for r in stack["items"]] == ["Always propose a concrete time."]

    lock = await api.http.patch(
        f"/v1/categories/{made['id']}", json={"never_graduate": True}, headers=org.agent
    )
    assert lock.status_code == 403 and lock.json()["code"] == "forbidden_scope"
    house = await api.http.post(
        f"/v1/admin/orgs/{org.org_id}/rules", json={"rule_text": "Sign as the team."}, headers=org.admin
    )
    assert house.status_code == 201, house.text
    refused = await api.http.post(
        f"/v1/rules/{house.json()['lineage_id']}/retire", json={"rev": 1}, headers=org.agent
    )
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden_scope"
    foreign = await api.http.post(f"/v1/rules/{lineage}/retire", json={"rev": 3}, headers=stranger.agent)
    assert foreign.status_code == 404, foreign.text
    renamed_abroad = await api.http.patch(
        f"/v1/categories/{made['id']}", json={"name": "Mine"}, headers=stranger.agent
    )
    assert renamed_abroad.status_code == 404, renamed_abroad.text

    await api.http.put(
        f"/v1/admin/projects/{org.project_id}/rule-settings", json={"write_approval": True}, headers=api.admin
    )
    staged = await api.http.post(f"/v1/rules/{lineage}/retire", json={"rev": 3}, headers=org.agent)
    assert staged.status_code == 403 and staged.json()["code"] == "forbidden_scope"
    history = (await api.http.get(f"/v1/rules/{lineage}/history", headers=org.agent)).json()
    assert [(r["action"], r["changed_by_kind"]) for r in history["revisions"]] == [
        ("created", "agent"),
        ("retired", "agent"),
        ("undone", "agent"),
    ]


async def test_promote_rule_makes_a_category_rule_general_and_moves_the_stack(api: Api) -> None:
    """promote_rule (REST and MCP): an active category rule becomes general in the same lineage, the
    rule high-water moves (drafts under the old stack are stale), and only a category rule promotes."""
    from tests.gateway.test_mcp import mcp_client, structured

    org, stranger = await Org.create(api), await Org.create(api)
    category = await org.category()
    rule = await org.save(
        org.agent, rule_text="Name the pilot's start date.", scope="category", category_id=category["id"]
    )
    before = (await api.http.get("/v1/rules", headers=org.agent)).json()
    async with mcp_client(api, org.agent) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["promote_rule"].output_schema is not None
        promoted = structured(await client.call_tool("promote_rule", {"id": rule["lineage_id"], "rev": 1}))
    assert (promoted["lineage_id"], promoted["rev"], promoted["scope"]) == (rule["lineage_id"], 2, "general")
    assert promoted.get("category_id") is None and promoted["status"] == "active"
    after = (await api.http.get("/v1/rules", headers=org.agent)).json()
    assert after["rule_high_water"] > before["rule_high_water"]
    general = (await api.http.get("/v1/rules", params={"scope": "general"}, headers=org.agent)).json()
    assert [r["rule_text"] for r in general["items"]] == ["Name the pilot's start date."]
    again = await api.http.post(f"/v1/rules/{rule['lineage_id']}/promote", json={"rev": 2}, headers=org.agent)
    assert again.status_code == 409 and again.json()["code"] == "wrong_state", again.text
    foreign = await api.http.post(
        f"/v1/rules/{rule['lineage_id']}/promote", json={"rev": 2}, headers=stranger.agent
    )
    assert foreign.status_code == 404
    history = (await api.http.get(f"/v1/rules/{rule['lineage_id']}/history", headers=org.agent)).json()
    assert [r["action"] for r in history["revisions"]] == ["created", "promoted"]


async def test_learn_review_rule_saves_a_rule_sourced_from_the_review(api: Api) -> None:
    """learn_review_rule (REST and MCP): the rule's source is the review, its scope the review's
    category; client_id replays; a turn of no such review is a 422; another project's review is 404."""
    from tests.conftest import draft
    from tests.gateway.test_mcp import mcp_client, structured

    org, stranger = await Org.create(api), await Org.create(api)
    category = await org.category()
    sent = await api.http.post("/v1/messages", json=draft(category_id=category["id"]), headers=org.agent)
    assert sent.status_code == 202, sent.text
    review_id = sent.json()["review_id"]
    turns = (await api.http.get(f"/v1/reviews/{review_id}/turns", headers=org.agent)).json()["items"]
    args = {"id": review_id, "rule_text": "Open with the prospect's own words.", "client_id": "learn-1"}
    if turns:
        args["turn_id"] = turns[-1]["id"]
    async with mcp_client(api, org.agent) as client:
        learnt = structured(await client.call_tool("learn_review_rule", args))
        replay = structured(await client.call_tool("learn_review_rule", args))
    assert (learnt["source_review_id"], learnt["scope"], learnt["category_id"]) == (
        review_id,
        "category",
        category["id"],
    )
    assert replay["id"] == learnt["id"]
    wrong = await api.http.post(
        f"/v1/reviews/{review_id}/rules",
        json={"rule_text": "Be brief always.", "turn_id": "trn_nope"},
        headers=org.agent,
    )
    assert wrong.status_code == 422 and wrong.json()["code"] == "bad_request", wrong.text
    foreign = await api.http.post(
        f"/v1/reviews/{review_id}/rules", json={"rule_text": "Be brief always."}, headers=stranger.agent
    )
    assert foreign.status_code == 404, foreign.text
