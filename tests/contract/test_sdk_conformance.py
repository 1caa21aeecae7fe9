"""Conformance with the SDK (spec 000, "How the contract stays honest"; spec/SDK.md): every agent route's
real answers in an end-to-end run, read as the SDK's exported type, and the SDK's request names accepted.

The SDK types are ``tests/contract/sdk.py``. A renamed field anywhere fails the run, and the negative test
proves the check is no tautology.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx
import pytest

from tests.conftest import INTENT, Api
from tests.contract.sdk import sdk_errors


class Recorder:
    """Every answer of the run, by the SDK type that reads it."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.seen: list[tuple[str, str, Any]] = []

    async def call(
        self, sdk_type: str, method: str, path: str, headers: dict[str, str], status: int = 200, **kwargs: Any
    ) -> Any:
        response: httpx.Response = await self.api.http.request(method, path, headers=headers, **kwargs)
        assert response.status_code == status, (method, path, response.text)
        body = response.json()
        self.seen.append((sdk_type, f"{method} {path}", body))
        return body


def sdk_send(**overrides: Any) -> dict[str, Any]:
    """A send as the SDK writes it: ``text``, ``category_confidence``."""
    return {"to": ["vp@acme.com"], "subject": "Q3 pilot", "text": "Shall we talk Tuesday?", "intent": INTENT,
            **overrides}  # fmt: skip


async def run_every_agent_route(api: Api) -> list[tuple[str, str, Any]]:
    project = await api.project()
    project_id = project["project_id"]
    keys = {kind: await api.key(project_id, kind) for kind in ("agent", "human", "review_agent")}
    agent, human, reviewer = (api.auth(keys[k]["api_key"]) for k in ("agent", "human", "review_agent"))
    run = Recorder(api)

    # Categories and rules.
    category = await run.call(
        "Category", "POST", "/v1/categories", agent, 201,
        json={"name": "Sales outreach", "description": "cold outbound", "scope": "agent_private"},
    )  # fmt: skip
    assert category["scope"] == "agent_private"
    await run.call("Page<Category>", "GET", "/v1/categories", agent)
    await run.call("Category", "GET", f"/v1/categories/{category['id']}", agent)
    await run.call("GraduationStatus", "GET", f"/v1/categories/{category['id']}/graduation", agent)
    rule = await run.call(
        "Rule", "POST", "/v1/rules", human, 201,
        json={"rule_text": "Propose a concrete time.", "scope": "category", "category_id": category["id"]},
    )  # fmt: skip
    rules = await run.call("RuleSnapshot", "GET", "/v1/rules", agent, params={"category_id": category["id"]})
    audit = await run.call("Page<RuleAuditEntry>", "GET", f"/v1/rules/{rule['lineage_id']}/audit", agent)
    assert [(e["action"], e["undone"]) for e in audit["items"]] == [("create", False)]

    # A queued send, read back every way the SDK reads it.
    queued = await run.call(
        "SubmitForReviewResult", "POST", "/v1/messages", agent, 202,
        json=sdk_send(category_id=category["id"], category_confidence=0.4,
                      composition_token=rules["composition_token"]),
    )  # fmt: skip
    assert queued["kind"] == "queued_for_review"
    both = await run.call("Problem", "POST", "/v1/messages", agent, 422, json=sdk_send(body_text="Hi"))
    assert both["errors"][0]["field"] == "/body_text"  # one body, under one of its two names
    review_id = queued["review"]["id"]
    await run.call("Review", "GET", f"/v1/reviews/{review_id}", agent)
    listed = await run.call(
        "Page<Review>",
        "GET",
        "/v1/reviews",
        agent,
        params={"state": "needs_review,in_review", "composer": "me"},
    )
    assert [r["id"] for r in listed["items"]] == [review_id]
    await run.call("Review", "POST", f"/v1/reviews/{review_id}/chat", agent, json={"text": "Tuesday or Wed?"})
    chat = await run.call("Review", "GET", f"/v1/reviews/{review_id}", agent)
    revised = await run.call(
        "Review", "POST", f"/v1/reviews/{review_id}/revisions", agent,
        json={"parent_revision": chat["revision"], "text": "Tuesday 10:00?", "html": "<p>Tuesday 10:00?</p>",
              "composition_token": rules["composition_token"]},
    )  # fmt: skip
    stale = await run.call(
        "Problem",
        "POST",
        f"/v1/reviews/{review_id}/revisions",
        agent,
        409,
        json={"parent_revision": 1, "text": "x"},
    )
    assert stale["code"] == "stale"
    cas = {"revision": revised["revision"], "version": revised["version"]}
    current = await run.call("Review", "POST", f"/v1/reviews/{review_id}/open", human, json=cas)
    await run.call(
        "Review", "POST", f"/v1/reviews/{review_id}/decision", human,
        json={"action": "reject", "revision": current["revision"], "feedback": "Lead with the ROI."},
    )  # fmt: skip
    feedback = await run.call("ReviewFeedback", "GET", f"/v1/reviews/{review_id}/feedback", agent)
    assert feedback["comments"] and all("created_at" in c for c in feedback["comments"])
    assert all(c["actor_id"] for c in feedback["comments"])  # each written by an actor of the run
    await run.call("Page<ReviewTurn>", "GET", f"/v1/reviews/{review_id}/turns", agent)
    await run.call("Review", "POST", f"/v1/reviews/{review_id}/cancel", agent, json={})

    # A review agent's decision answers a whole Review.
    await api.http.put(
        f"/v1/admin/projects/{project_id}/risk-dial",
        json={"account": {"min_confidence": 0.6, "first_contact_gate": False, "canary_rate": 0.0}},
        headers=api.admin,
    )
    await api.http.put(
        f"/v1/admin/projects/{project_id}/risk-dial",
        json={"categories": [{"category_id": category["id"], "min_confidence": 0.85}]},
        headers=api.admin,
    )
    dial = await run.call("RiskDial", "GET", "/v1/risk-dial", agent)
    row = next(c for c in dial["categories"] if c["category_id"] == category["id"])
    assert (
        row["min_confidence"] == 0.85 and row["first_contact_gate"] is None
    )  # every override: a value or null
    confident = await run.call(
        "SubmitForReviewResult", "POST", "/v1/messages", agent, 202, json=sdk_send(category_confidence=0.9)
    )
    await run.call(
        "ReviewerDecisionResult", "POST", f"/v1/reviews/{confident['review']['id']}/decision", reviewer,
        json={"action": "approve", "revision": 1},
    )  # fmt: skip
    context = await run.call(
        "ReviewDecisionContext", "GET", f"/v1/reviews/{confident['review']['id']}/decision-context", reviewer
    )
    assert context["review"]["id"] == confident["review"]["id"] and context["turns"]

    # The backlog: a draft composed under the rules in force is current; a new rule makes it stale; an honest
    # restamp against the new rules makes it current again.
    backlog = f"/v1/categories/{category['id']}/backlog"
    token = (await api.http.get("/v1/rules", params={"category_id": category["id"]}, headers=agent)).json()
    pending = await run.call(
        "SubmitForReviewResult", "POST", "/v1/messages", agent, 202,
        json=sdk_send(category_id=category["id"], composition_token=token["composition_token"]),
    )  # fmt: skip
    before = await run.call("ScanBacklogStatus", "GET", backlog, agent)
    assert (before["queued"], before["current_enough"], before["stale"]) == (1, 1, 0)
    await run.call(
        "Rule", "POST", "/v1/rules", human, 201,
        json={"rule_text": "Sign off with a first name.", "scope": "category", "category_id": category["id"]},
    )  # fmt: skip
    after = await run.call("ScanBacklogStatus", "GET", backlog, agent)
    assert (after["queued"], after["stale"]) == (1, 1)
    token = (await api.http.get("/v1/rules", params={"category_id": category["id"]}, headers=agent)).json()
    recheck = await _recheck_nudge(api, agent, pending["review"]["id"])
    versions = {"against_version": token["category_rules_version"],
                "house_style_version": token["house_style_version"]}  # fmt: skip
    too_far = await run.call(
        "Problem", "POST", f"/v1/reviews/{pending['review']['id']}/restamp", agent, 422,
        json={**versions, "recheck_through_seq": recheck["seq"] + 1},
    )  # fmt: skip
    assert too_far["errors"][0]["field"] == "/recheck_through_seq"
    stamped = await run.call(
        "Review", "POST", f"/v1/reviews/{pending['review']['id']}/restamp", agent,
        json={**versions, "expected_version": pending["review"]["version"], "recheck_through_seq": recheck["seq"]},
    )  # fmt: skip  # the SDK's restamp: the versions re-read, no parent_revision
    assert stamped["recheck_completed_through_seq"] == recheck["seq"]
    restamped = await run.call("ScanBacklogStatus", "GET", backlog, agent)
    assert (restamped["queued"], restamped["stale"]) == (1, 0)
    pacing = await run.call("CategoryPacingState", "GET", f"/v1/categories/{category['id']}/pacing", agent)
    assert pacing["lookahead_window"] == 3 and pacing["items"][0]["review_id"] == pending["review"]["id"]

    # A reply with the SDK's and the catalog's inputs; one against a thread that moved since is a 409.
    inbound = await api.http.post(
        f"/v1/admin/projects/{project_id}/inbound",
        json={"from": "vp@acme.com", "to": ["sales@us.example", "cto@acme.com"], "subject": "Pricing?"},
        headers=api.admin,
    )
    parent = inbound.json()
    thread = (await api.http.get(f"/v1/threads/{parent['thread_ref']}", headers=agent)).json()
    reply = {"text": "Thursday?", "intent": INTENT, "mode": "direct", "inbox": "sales@us.example",
             "thread_id": parent["thread_ref"], "reply_all": True,
             "expected_context_version": thread["context_version"],
             "expected_last_message_id": thread["last_message_id"]}  # fmt: skip
    replied = await run.call(
        "SubmitForReviewResult", "POST", f"/v1/messages/{parent['message_id']}/reply", agent, 202, json=reply
    )
    assert (replied["review"]["mode"], replied["review"]["effective_mode"]) == ("direct", "review")
    await api.http.post(
        f"/v1/admin/projects/{project_id}/inbound",
        json={"from": "cto@acme.com", "to": ["sales@us.example"], "subject": "Re: Pricing?",
              "headers": {"In-Reply-To": parent["rfc_message_id"]}},
        headers=api.admin,
    )  # fmt: skip
    moved = await run.call(
        "Problem", "POST", f"/v1/messages/{parent['message_id']}/reply", agent, 409, json=reply
    )
    assert moved["code"] == "reply_context_changed" and moved["current_state"]["context_version"] == "2"
    in_thread = await run.call(
        "Page<Review>", "GET", "/v1/reviews", agent,
        params={"inbox": "sales@us.example", "thread_id": parent["thread_ref"]},
    )  # fmt: skip
    assert [r["id"] for r in in_thread["items"]] == [replied["review"]["id"]]

    # A direct send answers the SDK's SentResult.
    await api.http.put(
        f"/v1/admin/projects/{project_id}/review-policy", json={"policy": "allow_direct"}, headers=api.admin
    )
    bare = {"to": ["cfo@acme.com"], "subject": "Invoice", "text": "Attached."}
    sent = await run.call("SubmitForReviewResult", "POST", "/v1/messages", agent, 202, json=bare)
    assert sent["kind"] == "sent" and sent["message"]["id"] == sent["review"]["sent_message_id"]

    # The nudges: drained, waited for, acked with the SDK's through_seq.
    events: list[dict[str, Any]] = []
    for _ in range(100):  # the nudges cross the outbox asynchronously
        events = (await run.call("ReviewEventsResult", "GET", "/v1/review-events", agent))["events"]
        if any(e["reason"] == "cancelled" for e in events) and any(e["seq"] == 0 for e in events):
            break
    mine = await run.call(
        "ReviewEventsResult", "GET", "/v1/review-events", agent, params={"review_id": review_id}
    )
    assert mine["events"] and {e["review_id"] for e in mine["events"]} == {review_id}
    await run.call("ReviewEventsResult", "GET", "/v1/review-events/wait", agent, params={"wait_seconds": 1})
    acks = [{"review_id": review_id, "through_seq": max(e["seq"] for e in mine["events"])}]
    await run.call("AckReviewEventResult", "POST", "/v1/review-events/ack", agent, json={"acks": acks})
    await run.call("AckReviewEventResult", "POST", "/v1/review-events/ack", agent, json={"broadcast_ids": []})
    # The rules saved above reached the agent as broadcasts (seq 0, no review_id); acked by id.
    broadcasts = [e["id"] for e in events if e["seq"] == 0]
    assert broadcasts and all("review_id" not in e for e in events if e["seq"] == 0)
    await run.call(
        "AckReviewEventResult", "POST", "/v1/review-events/ack", agent, json={"broadcast_ids": broadcasts}
    )

    # The SDK's rule and category writes: a revision by supersedes_id (a stale one is a 409), a graduation
    # proposal with evidence (answered by the graduation status), a rename.
    revised = await run.call(
        "Rule", "POST", "/v1/rules", human, 201,
        json={"rule_text": "Propose two concrete times.", "supersedes_id": rule["id"]},
    )  # fmt: skip
    assert (revised["lineage_id"], revised["rev"], revised["supersedes_id"]) == (
        rule["lineage_id"],
        2,
        rule["id"],
    )
    stale = await run.call(
        "Problem",
        "POST",
        "/v1/rules",
        human,
        409,
        json={"rule_text": "Propose a time.", "supersedes_id": rule["id"]},
    )
    assert stale["code"] == "stale"
    await run.call(
        "GraduationStatus", "POST", f"/v1/categories/{category['id']}/graduation-proposals", agent, 201,
        json={"evidence": {"approvals": 20, "last_edits": 0}},
    )  # fmt: skip
    await run.call(
        "Category", "PATCH", f"/v1/categories/{category['id']}", agent, json={"name": "Cold outreach"}
    )

    # A page's total counts every match, not the page.
    first = await run.call("Page<Review>", "GET", "/v1/reviews", agent, params={"limit": 1})
    every = (await api.http.get("/v1/reviews", params={"limit": 200}, headers=agent)).json()["items"]
    assert len(first["items"]) == 1 and first["total"] == len(every) > 1 and first["next_cursor"]
    await run.call("Category", "POST", "/v1/categories", agent, 201, json={"name": "Renewals"})
    categories = await run.call("Page<Category>", "GET", "/v1/categories", agent, params={"limit": 1})
    assert len(categories["items"]) == 1 and categories["total"] == 2
    return run.seen


async def _recheck_nudge(api: Api, headers: dict[str, str], review_id: str) -> dict[str, Any]:
    """The review's recheck nudge (a rule moved), once it crossed the outbox."""
    for _ in range(200):
        drained = await api.http.get("/v1/review-events", params={"review_id": review_id}, headers=headers)
        found = [
            e for e in drained.json()["events"] if e["reason"] in ("rule_changed", "propagate_general_rule")
        ]
        if found:
            return found[-1]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no recheck nudge for {review_id}")


@pytest.fixture
async def answers(api: Api) -> list[tuple[str, str, Any]]:
    return await run_every_agent_route(api)


async def test_every_agent_answer_reads_as_the_sdk_type(answers: list[tuple[str, str, Any]]) -> None:
    failures = {f"{route} as {sdk_type}": errors for sdk_type, route, body in answers
                if (errors := sdk_errors(sdk_type, body))}  # fmt: skip
    assert failures == {}
    assert {sdk_type for sdk_type, _, _ in answers} >= {
        "Review", "Page<Review>", "Page<ReviewTurn>", "SubmitForReviewResult", "ReviewFeedback",
        "ReviewEventsResult", "AckReviewEventResult", "ReviewerDecisionResult", "Category", "Page<Category>",
        "Rule", "RuleSnapshot", "GraduationStatus", "Problem", "ScanBacklogStatus", "Page<RuleAuditEntry>",
        "CategoryPacingState", "ReviewDecisionContext", "RiskDial",
    }  # fmt: skip


async def test_the_sdk_reads_the_recovery_facts_of_a_409(answers: list[tuple[str, str, Any]]) -> None:
    """The SDK's ReviewConflictError reads state, revision and allowed actions from ``code`` by ``field``."""
    problem = next(body for sdk_type, _, body in answers if sdk_type == "Problem" and body["code"] == "stale")
    by_field: dict[str, list[str]] = {}
    for hint in problem["errors"]:
        by_field.setdefault(hint["field"], []).append(hint["code"])
    assert by_field["state"] == ["needs_review"] or by_field["state"] == ["chatting"]
    assert by_field["revision"] == ["2"] and by_field["version"][0].isdigit()
    assert "submit_revision" in by_field["allowed_action"]
    # The SDK's extras say the same as one object, and what to do next.
    assert problem["next_action"] == "reread_and_retry"
    state = problem["current_state"]
    assert (state["state"], state["revision"]) == (by_field["state"][0], 2)
    assert "submit_revision" in state["allowed_actions"]


# Free-form JSON values (a nudge's payload, an intent's meta, headers, a diff): their keys are data.
FREE_FORM = frozenset({"payload", "intent", "intent_meta", "headers", "diff_json", "metadata", "attachments"})


def _renamings(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    """Every (object path, key) in ``value`` outside free-form values."""
    found: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append((path, key))
            if key not in FREE_FORM:
                found += _renamings(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _renamings(item, (*path, i))
    return found


def _renamed(value: Any, path: tuple[Any, ...], key: str) -> Any:
    changed = copy.deepcopy(value)
    target = changed
    for step in path:
        target = target[step]
    target[key + "_renamed"] = target.pop(key)
    return changed


async def test_renaming_any_field_of_any_answer_fails_the_check(answers: list[tuple[str, str, Any]]) -> None:
    """The negative test: the check is no tautology. Every field of every real answer, renamed, is refused."""
    survivors = [
        f"{route}: {'/'.join(map(str, (*path, key)))}"
        for sdk_type, route, body in answers
        for path, key in _renamings(body)
        if not sdk_errors(sdk_type, _renamed(body, path, key))
    ]
    assert survivors == []
