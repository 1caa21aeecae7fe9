"""The foundation slice through the gateway: send, read, list, cancel, drain, ack."""

from __future__ import annotations

from tests.conftest import Api, draft
from tests.e2e.helpers import events_until


async def test_send_queues_a_review_that_reads_back_and_lists(api: Api) -> None:
    agent = await api.agent()
    sent = await api.http.post("/v1/messages", json=draft(), headers=agent)
    assert sent.status_code == 202, sent.text
    assert sent.headers["x-contract-version"] == "0.1.0-pre.6"
    body = sent.json()
    assert body["status"] == "queued_for_review"
    assert body["state"] == "needs_review"
    assert body["review_id"].startswith("rr_")

    review = (await api.http.get(f"/v1/reviews/{body['review_id']}", headers=agent)).json()
    assert review["state"] == "needs_review"
    assert (review["revision"], review["version"], review["closed"]) == (1, 1, False)
    assert review["kind"] == "send"
    assert review["intent"] == draft()["intent"]
    assert review["created_at"].endswith("Z")
    assert "thread_ref" not in review and "message_id" not in review

    listed = (await api.http.get("/v1/reviews", headers=agent)).json()
    assert [r["id"] for r in listed["items"]] == [body["review_id"]], listed
    assert "next_cursor" not in listed


async def test_send_without_intent_is_refused_and_stores_nothing(api: Api) -> None:
    agent = await api.agent()
    body = draft()
    del body["intent"]
    refused = await api.http.post("/v1/messages", json=body, headers=agent)
    assert refused.status_code == 422
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["code"] == "intent_required"
    assert '"intent"' in problem["detail"] and "Nothing was sent" in problem["detail"]
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["items"] == []


async def test_list_reviews_pages_newest_first_and_filters_by_state(api: Api) -> None:
    agent = await api.agent()
    ids = [
        (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
        for _ in range(3)
    ]
    await api.http.post(f"/v1/reviews/{ids[0]}/cancel", json={"parent_revision": 1}, headers=agent)
    first = (await api.http.get("/v1/reviews", params={"limit": 2}, headers=agent)).json()
    assert [r["id"] for r in first["items"]] == [ids[2], ids[1]]
    rest = (
        await api.http.get("/v1/reviews", params={"limit": 2, "cursor": first["next_cursor"]}, headers=agent)
    ).json()
    assert [r["id"] for r in rest["items"]] == [ids[0]] and "next_cursor" not in rest
    pending = (await api.http.get("/v1/reviews", params={"state": ["needs_review"]}, headers=agent)).json()
    assert {r["id"] for r in pending["items"]} == {ids[1], ids[2]}


async def test_cancel_emits_one_terminal_nudge_that_ack_removes_for_good(api: Api) -> None:
    agent = await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]

    cancelled = await api.http.post(
        f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled" and cancelled.json()["closed"] is True

    events = await events_until(api, agent, 1)
    assert [(e["reason"], e["review_id"], e["seq"]) for e in events] == [("cancelled", review_id, 1)]
    assert events[0]["id"].startswith("ndg_")
    assert events[0]["payload"]["state"] == "cancelled"

    acked = await api.http.post(
        "/v1/review-events/ack", json={"acks": [{"review_id": review_id, "seq": 1}]}, headers=agent
    )
    assert acked.status_code == 200, acked.text
    assert (await api.http.get("/v1/review-events", headers=agent)).json()["events"] == []
    again = await api.http.post(
        "/v1/review-events/ack", json={"acks": [{"review_id": review_id, "seq": 1}]}, headers=agent
    )
    assert again.status_code == 200  # acking is idempotent
    assert (await api.http.get("/v1/review-events", headers=agent)).json()["events"] == []


async def test_cancel_of_a_closed_review_is_terminal_and_leaves_one_front_run_next(api: Api) -> None:
    agent = await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    await api.http.post(f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent)
    for _ in range(3):  # a retry loop hammering the same 409
        refused = await api.http.post(
            f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=agent
        )
        assert refused.status_code == 409
        problem = refused.json()
        assert problem["code"] == "terminal"
        assert {"field": "allowed_action", "code": "get_review", "detail": "get_review"} in problem["errors"]
    events = await events_until(api, agent, 2)
    assert [e["reason"] for e in events] == ["cancelled", "front_run_next"]
    assert events[1]["payload"]["your_parent_revision"] == 1


async def test_stale_parent_revision_is_a_409_with_recovery_facts_and_no_mutation(api: Api) -> None:
    agent = await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=agent)).json()["review_id"]
    refused = await api.http.post(
        f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 7}, headers=agent
    )
    assert refused.status_code == 409
    problem = refused.json()
    assert problem["code"] == "stale"
    facts = {(e["field"], e["code"]) for e in problem["errors"]}
    assert {
        ("state", "needs_review"),
        ("revision", "1"),
        ("version", "1"),
        ("allowed_action", "cancel_review"),
    } <= facts
    assert (await api.http.get(f"/v1/reviews/{review_id}", headers=agent)).json()["version"] == 1


async def test_another_projects_review_is_not_found(api: Api) -> None:
    mine, theirs = await api.agent(), await api.agent()
    review_id = (await api.http.post("/v1/messages", json=draft(), headers=mine)).json()["review_id"]
    assert (await api.http.get(f"/v1/reviews/{review_id}", headers=theirs)).status_code == 404
    cancel = await api.http.post(
        f"/v1/reviews/{review_id}/cancel", json={"parent_revision": 1}, headers=theirs
    )
    assert cancel.status_code == 404
    assert (await api.http.get(f"/v1/reviews/{review_id}", headers=mine)).json()["state"] == "needs_review"


async def test_idempotency_key_replays_the_submit_and_refuses_another_body(api: Api) -> None:
    agent = await api.agent()
    headers = {**agent, "Idempotency-Key": "k-1"}
    first = (await api.http.post("/v1/messages", json=draft(), headers=headers)).json()
    second = (await api.http.post("/v1/messages", json=draft(), headers=headers)).json()
    assert first["review_id"] == second["review_id"]
    other = await api.http.post("/v1/messages", json=draft(subject="Different"), headers=headers)
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"
    assert len((await api.http.get("/v1/reviews", headers=agent)).json()["items"]) == 1
