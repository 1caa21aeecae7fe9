"""review_state with the contexts it calls: diff (edits), rules (composition tokens, saved rules, rule
and category events, the risk dial) and dispatch_budget (review-agent round budgets). These need those
services built; until then review_state answers 503 unavailable and writes nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
from reviewloop.common.v1 import common_pb2
from reviewloop.diff.v1 import diff_pb2, diff_pb2_grpc

from tests.conftest import Api, draft
from tests.e2e.helpers import events_until


async def _until(
    api: Api, headers: dict[str, str], done: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 15.0
) -> list[dict[str, Any]]:
    """The caller's events once ``done`` holds for them (the outbox hop is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = await events_until(api, headers, 0, timeout_s=0)
        if done(events) or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.1)


async def _setup(api: Api) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"], "agent"))["api_key"])
    human = api.auth((await api.key(project["project_id"], "human"))["api_key"])
    return project, agent, human


async def _opened(api: Api, agent: dict[str, str], human: dict[str, str], **overrides: Any) -> dict[str, Any]:
    sent = await api.http.post("/v1/messages", json=draft(**overrides), headers=agent)
    assert sent.status_code == 202, sent.text
    review_id = sent.json()["review_id"]
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200, opened.text
    return dict(opened.json())


async def _auto_send_project(api: Api) -> tuple[dict[str, Any], dict[str, str], str]:
    """A project on auto_send_graduated with one graduated category and a permissive dial."""
    project, agent, _ = await _setup(api)
    pid = project["project_id"]
    category = await api.http.post(
        f"/v1/admin/projects/{pid}/categories",
        json={"name": "Sales", "description": "outreach"},
        headers=api.admin,
    )
    assert category.status_code in (200, 201), category.text
    category_id = category.json()["id"]
    dial = await api.http.put(
        f"/v1/admin/projects/{pid}/risk-dial",
        json={
            "account": {
                "min_confidence": 0.6,
                "first_contact_gate": False,
                "canary_rate": 0.0,
                "graduate_min_approvals": 0,  # a maturity gate met from the start
                "graduate_min_age_hours": 0,
            }
        },
        headers=api.admin,
    )
    assert dial.status_code == 200, dial.text
    graduated = await api.http.post(
        f"/v1/admin/categories/{category_id}/graduate", json={"to_state": "auto_notify"}, headers=api.admin
    )
    assert graduated.status_code == 200, graduated.text
    policy = await api.http.put(
        f"/v1/admin/projects/{pid}/review-policy", json={"policy": "auto_send_graduated"}, headers=api.admin
    )
    assert policy.status_code == 200, policy.text
    return project, agent, category_id


async def test_a_human_edit_is_diffed_and_reads_as_edited_everywhere(api: Api) -> None:
    _, agent, human = await _setup(api)
    review = await _opened(api, agent, human)
    decided = await api.http.post(
        f"/v1/reviews/{review['id']}/decision",
        json={
            "action": "edit",
            "revision": review["revision"],
            "version": review["version"],
            "body": "Can you do Thursday 2pm?",
            "feedback": "tightened the CTA",
        },
        headers=human,
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["state"] == "sent" and decided.json()["revision"] == 2
    feedback = (await api.http.get(f"/v1/reviews/{review['id']}/feedback", headers=agent)).json()
    assert feedback["decision"] == "edited"
    assert feedback["diff_json"]["fields_changed"] == ["body_text"]
    assert feedback["diff_unified"]
    events = await events_until(api, agent, 1)
    assert events[-1]["reason"] == "sent" and events[-1]["payload"]["decision"] == "edited"


async def test_a_humans_new_rule_is_saved_with_its_source_review(api: Api) -> None:
    _, agent, human = await _setup(api)
    review = await _opened(api, agent, human)
    decided = await api.http.post(
        f"/v1/reviews/{review['id']}/decision",
        json={
            "action": "reject",
            "revision": review["revision"],
            "version": review["version"],
            "feedback": "never say 'let me know'",
            "new_rule": {"rule_text": "Always propose a concrete time.", "scope": "general"},
        },
        headers=human,
    )
    assert decided.status_code == 200, decided.text
    feedback = (await api.http.get(f"/v1/reviews/{review['id']}/feedback", headers=agent)).json()
    assert len(feedback["new_rules"]) == 1 and feedback["new_rules"][0].startswith("rule_")
    saved = await _rule_saved(api, agent, feedback["new_rules"][0])
    assert saved["source_review_id"] == review["id"]


async def _rule_saved(api: Api, headers: dict[str, str], rule_id: str, **query: str) -> dict[str, Any]:
    """The rule ``rule_id`` once the rules context saved it (it travels in the decision's outbox)."""
    deadline = time.monotonic() + 15
    while True:
        rules = (await api.http.get("/v1/rules", params=query, headers=headers)).json()["items"]
        saved = [r for r in rules if r["id"] == rule_id]
        if saved:
            return dict(saved[0])
        assert time.monotonic() < deadline, f"rule {rule_id} was never saved"
        await asyncio.sleep(0.1)


async def test_a_new_rule_on_a_categorized_review_is_saved_only_with_its_decision(api: Api) -> None:
    project, agent, human = await _setup(api)
    category = await api.http.post(
        f"/v1/admin/projects/{project['project_id']}/categories",
        json={"name": "Sales", "description": "outreach"},
        headers=api.admin,
    )
    assert category.status_code in (200, 201), category.text
    category_id = category.json()["id"]
    review = await _opened(api, agent, human, category_id=category_id)
    rule = {"rule_text": "Always propose a concrete time."}
    chat = await api.http.post(f"/v1/reviews/{review['id']}/chat", json={"text": "a question"}, headers=agent)
    assert chat.status_code in (200, 201), chat.text
    decide = f"/v1/reviews/{review['id']}/decision"
    stale = await api.http.post(
        decide,
        json={"action": "reject", "revision": 1, "version": review["version"], "new_rule": rule},
        headers=human,
    )
    assert stale.status_code == 409 and stale.json()["code"] == "stale", stale.text
    now = (await api.http.get(f"/v1/reviews/{review['id']}", headers=human)).json()
    decided = await api.http.post(
        decide,
        json={"action": "reject", "revision": 1, "version": now["version"], "new_rule": rule},
        headers=human,
    )
    assert decided.status_code == 200, decided.text  # a general rule on a categorized review; no duplicate
    feedback = (await api.http.get(f"/v1/reviews/{review['id']}/feedback", headers=agent)).json()
    [rule_id] = feedback["new_rules"]
    saved = await _rule_saved(api, agent, rule_id)
    assert (saved["scope"], saved.get("category_id") or "") == ("general", "")
    rules = (await api.http.get("/v1/rules", headers=agent)).json()["items"]
    assert [r["id"] for r in rules if r["rule_text"] == rule["rule_text"]] == [
        rule_id
    ]  # the stale one left none


async def test_concurrent_edits_of_one_revision_leave_only_the_winners_diff(api: Api) -> None:
    project, agent, human = await _setup(api)
    review = await _opened(api, agent, human)
    texts = [f"Edit number {i}." for i in range(4)]
    answers = await asyncio.gather(
        *(
            api.http.post(
                f"/v1/reviews/{review['id']}/decision",
                json={"action": "edit", "revision": 1, "version": review["version"], "body": text},
                headers=human,
            )
            for text in texts
        )
    )
    assert sorted(a.status_code for a in answers) == [200, 409, 409, 409], [a.text for a in answers]
    winner = next(a.json() for a in answers if a.status_code == 200)
    feedback = (await api.http.get(f"/v1/reviews/{review['id']}/feedback", headers=agent)).json()
    deadline = time.monotonic() + 15
    async with grpc.aio.insecure_channel(api.stack.address("diff")) as channel:
        stub = diff_pb2_grpc.DiffServiceStub(channel)
        while True:
            try:
                stored = await stub.GetDiff(
                    diff_pb2.GetDiffRequest(
                        principal=common_pb2.Principal(
                            org_id=project["org_id"],
                            project_id=project["project_id"],
                            actor_kind=common_pb2.ACTOR_KIND_HUMAN,
                            actor_id="key_test",
                        ),
                        review_id=review["id"],
                        from_revision=1,
                        to_revision=2,
                    )
                )
                break
            except grpc.aio.AioRpcError as error:
                assert error.code() is grpc.StatusCode.NOT_FOUND and time.monotonic() < deadline
                await asyncio.sleep(0.1)
    assert [t for t in texts if t in stored.diff_json] == [winner["body_text"]]
    assert stored.diff_unified == feedback["diff_unified"]


async def test_a_stale_composition_token_is_born_stale_with_no_mutation_and_a_rule_changed_nudge(
    api: Api,
) -> None:
    _, agent, _ = await _setup(api)
    token = (await api.http.get("/v1/rules", headers=agent)).json()["composition_token"]
    sent = await api.http.post("/v1/messages", json=draft(composition_token=token), headers=agent)
    assert sent.status_code == 202, sent.text
    review_id = sent.json()["review_id"]
    saved = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Sign off with the first name only.", "scope": "general"},
        headers=agent,
    )
    assert saved.status_code in (200, 201), saved.text
    refused = await api.http.post(
        f"/v1/reviews/{review_id}/revisions",
        json={"parent_revision": 1, "body_text": "v2", "composition_token": token},
        headers=agent,
    )
    assert refused.status_code == 409 and refused.json()["code"] == "born_stale", refused.text
    review = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert (review["revision"], review["body_text"]) == (1, draft()["body_text"])
    # The draft's own nudge (the project's broadcast of the rule, with no review_id, may come first).
    events = await _until(
        api,
        agent,
        lambda es: any(e["reason"] == "rule_changed" and e.get("review_id") == review_id for e in es),
    )
    assert "rule_changed" in {e["reason"] for e in events if e.get("review_id") == review_id}
    fresh = (await api.http.get("/v1/rules", headers=agent)).json()["composition_token"]
    restamped = await api.http.post(
        f"/v1/reviews/{review_id}/restamp",
        json={"parent_revision": 1, "composition_token": fresh},
        headers=agent,
    )
    assert restamped.status_code == 200, restamped.text


async def test_a_redraft_without_a_token_after_a_rule_change_is_born_stale(api: Api) -> None:
    _, agent, _ = await _setup(api)
    sent = await api.http.post("/v1/messages", json=draft(), headers=agent)  # no composition token
    assert sent.status_code == 202, sent.text
    review_id = sent.json()["review_id"]
    redraft = f"/v1/reviews/{review_id}/revisions"
    same = await api.http.post(redraft, json={"parent_revision": 1, "body_text": "v2"}, headers=agent)
    assert same.status_code == 200, same.text  # the stack did not move: no token needed
    saved = await api.http.post(
        "/v1/rules",
        json={"rule_text": "Sign off with the first name only.", "scope": "general"},
        headers=agent,
    )
    assert saved.status_code in (200, 201), saved.text
    refused = await api.http.post(redraft, json={"parent_revision": 2, "body_text": "v3"}, headers=agent)
    assert refused.status_code == 409 and refused.json()["code"] == "born_stale", refused.text
    review = (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()
    assert (review["revision"], review["body_text"]) == (2, "v2")
    events = await _until(
        api,
        agent,
        lambda es: any(e["reason"] == "rule_changed" and e["payload"].get("born_stale") for e in es),
    )
    assert any(e["payload"].get("born_stale") for e in events if e.get("review_id") == review_id)
    fresh = (await api.http.get("/v1/rules", headers=agent)).json()["composition_token"]
    passed = await api.http.post(
        redraft, json={"parent_revision": 2, "body_text": "v3", "composition_token": fresh}, headers=agent
    )
    assert passed.status_code == 200 and passed.json()["revision"] == 3, passed.text


async def test_a_general_rule_propagates_to_pending_drafts_a_few_at_a_time(api: Api) -> None:
    project, agent, _ = await _setup(api)
    interval = await api.http.put(
        f"/v1/admin/projects/{project['project_id']}/pacing",
        json={"nudge_min_interval_ms": 0},
        headers=api.admin,
    )
    assert interval.status_code == 200, interval.text
    ids = []
    for _ in range(4):
        sent = await api.http.post("/v1/messages", json=draft(), headers=agent)
        ids.append(sent.json()["review_id"])
    rule = await api.http.post(
        f"/v1/admin/orgs/{project['org_id']}/rules",
        json={"rule_text": "No exclamation marks."},
        headers=api.admin,
    )
    assert rule.status_code in (200, 201), rule.text
    events = await events_until(api, agent, 3)
    propagated = [e for e in events if e["reason"] == "propagate_general_rule"]
    assert sorted(e["review_id"] for e in propagated) == sorted(ids[:3])  # the look-ahead window, not all
    assert {e["payload"]["suggested_batch"] for e in propagated} == {3}
    assert {e["payload"]["siblings"]["pending_count"] for e in propagated} == {3}
    # An honest restamp of a nudged draft opens its slot: the fourth draft is nudged next.
    token = (await api.http.get("/v1/rules", headers=agent)).json()["composition_token"]
    restamped = await api.http.post(
        f"/v1/reviews/{ids[0]}/restamp",
        json={"parent_revision": 1, "composition_token": token},
        headers=agent,
    )
    assert restamped.status_code == 200, restamped.text
    events = await _until(
        api,
        agent,
        lambda es: any(e["reason"] == "propagate_general_rule" and e.get("review_id") == ids[3] for e in es),
    )
    assert [e["payload"]["siblings"]["pending_count"] for e in events if e.get("review_id") == ids[3]] == [2]


async def test_a_graduated_category_auto_sends_when_every_gate_passes(api: Api) -> None:
    project, agent, category_id = await _auto_send_project(api)
    sent = await api.http.post(
        "/v1/messages", json=draft(category_id=category_id, confidence=0.9), headers=agent
    )
    assert sent.status_code == 202, sent.text
    assert sent.json()["status"] == "sent"
    assert sent.json()["review"]["send_path"] == "graduated_auto" and sent.json()["state"] == "auto_sent"
    held = await api.http.post(
        "/v1/messages", json=draft(category_id=category_id, confidence=0.2), headers=agent
    )
    assert held.json()["state"] == "needs_review" and held.json()["gate_outcome"] == "held:low_confidence"
    # auto_notify: the project's humans are told (the console's queue of mail sent without review).
    human = api.auth((await api.key(project["project_id"], "human"))["api_key"])
    queue = await api.http.get("/v1/reviews", params={"humans_notified": "true"}, headers=human)
    assert queue.status_code == 200, queue.text
    assert [r["id"] for r in queue.json()["items"]] == [sent.json()["review_id"]]


async def test_the_daily_auto_send_cap_is_spent_only_by_a_committed_release(api: Api) -> None:
    project, agent, category_id = await _auto_send_project(api)
    capped = await api.http.put(
        f"/v1/admin/projects/{project['project_id']}/risk-dial",
        json={"account": {"auto_send_cap_per_day": 2}},
        headers=api.admin,
    )
    assert capped.status_code == 200, capped.text
    body = draft(category_id=category_id, confidence=0.9)
    twins = await asyncio.gather(
        *(
            api.http.post("/v1/messages", json=body, headers={**agent, "Idempotency-Key": "once"})
            for _ in range(3)
        )
    )
    answered = [t.json()["review_id"] for t in twins if t.status_code == 202]
    # A twin still running at the gateway may be told so (409); every answer names the one review.
    assert answered and set(answered) == {answered[0]}, [t.text for t in twins]
    assert all(t.status_code in (202, 409) for t in twins), [t.text for t in twins]
    second = await api.http.post("/v1/messages", json=body, headers=agent)
    assert second.json()["state"] == "auto_sent", second.text  # the twins spent one unit of two
    third = await api.http.post("/v1/messages", json=body, headers=agent)
    assert (third.json()["state"], third.json()["gate_outcome"]) == ("needs_review", "held:daily_cap")


async def test_a_review_agent_releases_or_is_overridden_by_a_breaker(api: Api) -> None:
    project, agent, _ = await _setup(api)
    reviewer = api.auth((await api.key(project["project_id"], "review_agent"))["api_key"])
    await api.http.put(
        f"/v1/admin/projects/{project['project_id']}/risk-dial",
        json={"account": {"min_confidence": 0.6, "first_contact_gate": False, "canary_rate": 0.0}},
        headers=api.admin,
    )
    confident = (await api.http.post("/v1/messages", json=draft(confidence=0.9), headers=agent)).json()[
        "review_id"
    ]
    result = await api.http.post(
        f"/v1/reviews/{confident}/decision",
        json={"action": "approve", "revision": 1, "version": 1},
        headers=reviewer,
    )
    assert result.status_code == 200, result.text
    body = result.json()
    assert (body["kind"], body["sent"], body["sent_to_human"]) == ("sent", True, False)
    assert body["message_id"].startswith("msg_") and body["review"]["state"] == "sent"
    unsure = (await api.http.post("/v1/messages", json=draft(confidence=0.1), headers=agent)).json()[
        "review_id"
    ]
    held = await api.http.post(
        f"/v1/reviews/{unsure}/decision",
        json={"action": "approve", "revision": 1, "version": 1},
        headers=reviewer,
    )
    assert held.json()["kind"] == "sent_to_human" and held.json()["forced_by_breaker"] == "low_confidence"


async def test_review_agent_rounds_spend_the_reviews_round_budget_in_dispatch_budget(api: Api) -> None:
    project, agent, human = await _setup(api)
    reviewer = api.auth((await api.key(project["project_id"], "review_agent"))["api_key"])
    review_id = (await api.http.post("/v1/messages", json=draft(confidence=0.9), headers=agent)).json()[
        "review_id"
    ]

    async def decide(action: str) -> dict[str, Any]:
        review = (await api.http.get(f"/v1/reviews/{review_id}", headers=human)).json()
        answer = await api.http.post(
            f"/v1/reviews/{review_id}/decision",
            json={"action": action, "revision": review["revision"], "version": review["version"]},
            headers=reviewer,
        )
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    budget_url = f"/v1/review-rounds/budget?run_id={review_id}"
    for round_ in range(1, 6):
        assert (await decide("escalate"))["kind"] == "sent_to_human"
        budget = (await api.http.get(budget_url, headers=reviewer)).json()
        assert (budget["used"], budget["limit"]) == (round_, 5)
    assert budget["exhausted"] is True
    # The decision context says so before the next decision: breaker (a) tripped, a human decides next.
    context = (await api.http.get(f"/v1/reviews/{review_id}/decision-context", headers=reviewer)).json()
    assert (context["hop_count"], context["max_hops"], context["hops_exhausted"]) == (5, 5, True)
    assert (context["force_to_human"], context["force_reason"], context["deadline_passed"]) == (
        True,
        "max_hops_reached",
        False,
    )
    forced = await decide("approve")
    assert (forced["kind"], forced["forced_by_breaker"]) == ("sent_to_human", "max_hops_reached")
    assert (await api.http.get(budget_url, headers=reviewer)).json()["admissions"] == 5


async def test_the_decision_context_counts_hops_and_says_why_a_breaker_forced_a_human(api: Api) -> None:
    """get_review_decision_context: the review and its thread in one answer; hops are the review-agent
    rounds spent against dispatch_budget's limit; a breaker's hold is force_to_human with its name; no
    deadline is recorded."""
    project, agent, _ = await _setup(api)
    reviewer = api.auth((await api.key(project["project_id"], "review_agent"))["api_key"])
    await api.http.put(
        f"/v1/admin/projects/{project['project_id']}/risk-dial",
        json={"account": {"min_confidence": 0.6, "first_contact_gate": False, "canary_rate": 0.0}},
        headers=api.admin,
    )
    unsure = (await api.http.post("/v1/messages", json=draft(confidence=0.1), headers=agent)).json()[
        "review_id"
    ]
    before = await api.http.get(f"/v1/reviews/{unsure}/decision-context", headers=reviewer)
    assert before.status_code == 200, before.text
    context = before.json()
    review, turns = context.pop("review"), context.pop("turns")
    assert context == {
        "review_id": unsure,
        "hop_count": 0,
        "max_hops": None,
        "review_deadline": None,
        "deadline_passed": False,
        "hops_exhausted": False,
        "force_to_human": False,
    }
    assert (review["id"], review["state"], "turns" in review) == (unsure, "needs_review", False)
    assert [t["turn_type"] for t in turns] == [
        t["turn_type"]
        for t in (await api.http.get(f"/v1/reviews/{unsure}/turns", headers=agent)).json()["items"]
    ]
    held = await api.http.post(
        f"/v1/reviews/{unsure}/decision",
        json={"action": "approve", "revision": 1, "version": 1},
        headers=reviewer,
    )
    assert held.json()["forced_by_breaker"] == "low_confidence", held.text
    after = (await api.http.get(f"/v1/reviews/{unsure}/decision-context", headers=agent)).json()
    assert (after["hop_count"], after["max_hops"]) == (1, 5)
    assert (after["force_to_human"], after["force_reason"]) == (True, "low_confidence")
    assert (after["hops_exhausted"], after["deadline_passed"]) == (False, False)  # a gate's hold, no breaker
    assert after["review"]["version"] > review["version"] and len(after["turns"]) > len(turns)
    stranger = await api.agent()
    assert (await api.http.get(f"/v1/reviews/{unsure}/decision-context", headers=stranger)).status_code == 404
