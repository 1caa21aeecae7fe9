"""The review lifecycle of spec 000 through the gateway, with the parts that need no other context:
the policy table, the human plane, chat, reply / forward, the console, and the 409 family."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from tests.conftest import Api, draft
from tests.e2e.helpers import events_until


async def _setup(api: Api) -> tuple[str, dict[str, str], dict[str, str]]:
    """A project with an agent key and a human key."""
    project = (await api.project())["project_id"]
    agent = api.auth((await api.key(project, "agent"))["api_key"])
    human = api.auth((await api.key(project, "human"))["api_key"])
    return project, agent, human


async def _send(api: Api, agent: dict[str, str], **overrides: Any) -> dict[str, Any]:
    response = await api.http.post("/v1/messages", json=draft(**overrides), headers=agent)
    assert response.status_code == 202, response.text
    return dict(response.json())


async def _review(api: Api, headers: dict[str, str], review_id: str) -> dict[str, Any]:
    response = await api.http.get(f"/v1/reviews/{review_id}", headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _facts(problem: dict[str, Any]) -> set[tuple[str, Any]]:
    """The recovery facts as the SDK reads them: the hint's ``field`` and its value (a string)."""
    return {(e["field"], e["detail"]) for e in problem.get("errors", [])}


async def test_every_review_route_carries_the_spec_verb_as_operation_id(api: Api) -> None:
    spec = (await api.http.get("/openapi.json")).json()
    ids = {op.get("operationId") for path in spec["paths"].values() for op in path.values()}
    assert {
        "send_email",
        "reply_to_email",
        "forward_email",
        "get_review",
        "list_reviews",
        "submit_revision",
        "restamp_review",
        "cancel_review",
        "post_review_chat",
        "get_review_feedback",
        "get_effective_review_policy",
        "open_review",
        "decide_review",
        "set_review_policy",
        "block_recipient",
        "suppress_recipient",
        "record_inbound_mail",
    } <= ids


async def test_a_human_opens_comments_and_approves_and_the_agent_learns_it_was_sent(api: Api) -> None:
    _, agent, human = await _setup(api)
    marker = uuid.uuid4().hex
    review_id = (await _send(api, agent, subject=f"Q3 pilot {marker}"))["review_id"]
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200 and opened.json()["state"] == "in_review", opened.text
    comment = await api.http.post(
        f"/v1/reviews/{review_id}/chat", json={"text": "be more pushy"}, headers=human
    )
    assert comment.status_code == 200 and comment.json()["state"] == "chatting", comment.text
    current = comment.json()
    approved = await api.http.post(
        f"/v1/reviews/{review_id}/decision",
        json={"action": "approve", "revision": current["revision"], "version": current["version"]},
        headers=human,
    )
    assert approved.status_code == 200, approved.text
    sent = approved.json()
    assert (sent["state"], sent["closed"], sent["send_path"]) == ("sent", True, "human_reviewed")
    assert sent["message_id"].startswith("msg_") and sent["sent_at"].endswith("Z")
    assert "send_error" not in sent and "thread_ref" not in sent
    emls = [p for p in (api.stack.data_dir / "outbox").glob("*.eml") if marker.encode() in p.read_bytes()]
    assert len(emls) == 1

    events = await events_until(api, agent, 2)
    assert [e["reason"] for e in events] == ["feedback_added", "sent"]
    assert events[-1]["seq"] == max(e["seq"] for e in events)
    assert events[-1]["payload"]["message_id"] == sent["message_id"]
    assert events[-1]["payload"]["decision"] == "approved" and events[-1]["payload"]["state"] == "sent"
    feedback = (await api.http.get(f"/v1/reviews/{review_id}/feedback", headers=agent)).json()
    assert feedback["decision"] == "approved" and feedback["new_rules"] == []
    assert [(c["actor_kind"], c["body"]) for c in feedback["comments"]] == [("human", "be more pushy")]
    assert [t["turn_type"] for t in (await _review(api, agent, review_id))["turns"]] == [
        "opened",
        "human_comment",
        "decision",
    ]


async def test_the_policy_table_through_the_console_and_the_direct_send_202(api: Api) -> None:
    project, agent, _ = await _setup(api)
    assert (await api.http.get("/v1/review-policy", headers=agent)).json() == {
        "policy": "require_review",
        "source": "floor",
        "require_composition_token": False,
    }
    no_intent = draft()
    del no_intent["intent"]
    floor = await api.http.post("/v1/messages", json=no_intent, headers=agent)
    assert (floor.status_code, floor.json()["code"]) == (422, "intent_required")
    hints = {e.get("field"): e.get("detail") for e in floor.json()["errors"]}
    assert hints["policy"] == "require_review (source: floor)"
    refused = await api.http.put(
        f"/v1/admin/projects/{project}/review-policy", json={"policy": "allow_direct"}, headers=agent
    )
    assert refused.status_code == 403  # an agent can never widen its own policy
    bad = await api.http.put(
        f"/v1/admin/projects/{project}/review-policy", json={"policy": "yolo"}, headers=api.admin
    )
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "/policy"
    done = await api.http.put(
        f"/v1/admin/projects/{project}/review-policy", json={"policy": "allow_direct"}, headers=api.admin
    )
    assert done.json() == {"policy": "allow_direct", "source": "override", "require_composition_token": False}
    assert (await api.http.get("/v1/review-policy", headers=agent)).json()["policy"] == "allow_direct"

    body = draft()
    del body["intent"]
    direct = await api.http.post("/v1/messages", json=body, headers=agent)
    assert direct.status_code == 202, direct.text
    result = direct.json()
    assert result["status"] == "sent" and result["message_id"].startswith("msg_")
    assert result["review_id"].startswith("rr_")
    review = await _review(api, agent, result["review_id"])
    assert (review["state"], review["send_path"], review["closed"]) == ("auto_sent", "agent_direct", True)
    queued = await _send(api, agent)  # with an intent: you opted in to review
    assert queued["status"] == "queued_for_review"
    events = await events_until(api, agent, 1)
    assert [(e["reason"], e["payload"]["state"], e["payload"]["send_path"]) for e in events] == [
        ("sent", "auto_sent", "agent_direct")
    ]


async def test_an_admin_key_administers_only_its_own_org(api: Api) -> None:
    mine, theirs = await api.project(), await api.project()
    admin = api.auth((await api.key(mine["project_id"], "admin"))["api_key"])
    ok = await api.http.post(
        f"/v1/admin/projects/{mine['project_id']}/blocks", json={"address": "x@acme.com"}, headers=admin
    )
    assert ok.status_code == 201, ok.text
    assert (ok.json()["address"], ok.json()["blocked"], ok.json()["suppressed"]) == (
        "x@acme.com",
        True,
        False,
    )
    other = await api.http.post(
        f"/v1/admin/projects/{theirs['project_id']}/blocks", json={"address": "x@acme.com"}, headers=admin
    )
    assert other.status_code == 404


async def test_blocks_and_suppressions_refuse_at_submit_before_the_intent_gate(api: Api) -> None:
    project, agent, _ = await _setup(api)
    await api.http.post(
        f"/v1/admin/projects/{project}/blocks", json={"address": "no@acme.com"}, headers=api.admin
    )
    await api.http.post(
        f"/v1/admin/projects/{project}/suppressions", json={"address": "gone@acme.com"}, headers=api.admin
    )
    for address, status, code in (
        ("no@acme.com", 403, "recipient_blocked"),
        ("gone@acme.com", 422, "recipient_suppressed"),
    ):
        body = draft(to=[address])
        del body["intent"]
        refused = await api.http.post("/v1/messages", json=body, headers=agent)
        assert (refused.status_code, refused.json()["code"]) == (status, code)
        assert ("recipient", address) in _facts(refused.json())
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["items"] == []


async def test_an_admin_lists_blocks_and_suppressions_and_lifts_them(api: Api) -> None:
    project, agent, _ = await _setup(api)
    admin_key = await api.key(project, "admin")
    admin = api.auth(admin_key["api_key"])
    base = f"/v1/admin/projects/{project}"
    assert (
        await api.http.post(f"{base}/blocks", json={"address": "No@Acme.com"}, headers=admin)
    ).status_code == 201
    for address in ("no@acme.com", "gone@acme.com"):
        made = await api.http.post(f"{base}/suppressions", json={"address": address}, headers=admin)
        assert made.status_code == 201, made.text

    listed = await api.http.get(f"{base}/contacts", headers=admin)
    assert listed.status_code == 200, listed.text
    rows = {c["address"]: c for c in listed.json()["contacts"]}
    assert list(rows) == ["gone@acme.com", "no@acme.com"]
    no = rows["no@acme.com"]
    assert (no["blocked"], no["suppressed"]) == (True, True)
    assert no["blocked_by"] == no["suppressed_by"] and no["blocked_by"]  # the admin key's actor
    assert no["blocked_at"] <= no["suppressed_at"]
    assert (rows["gone@acme.com"]["blocked"], rows["gone@acme.com"].get("blocked_at")) == (False, None)
    assert (await api.http.get(f"{base}/contacts", headers=agent)).status_code == 403
    stranger = await api.project()
    elsewhere = await api.http.get(f"/v1/admin/projects/{stranger['project_id']}/contacts", headers=admin)
    assert elsewhere.status_code == 404

    lifted = await api.http.delete(f"{base}/blocks/no@acme.com", headers=admin)
    assert lifted.status_code == 200, lifted.text
    assert (lifted.json()["blocked"], lifted.json()["suppressed"]) == (False, True)
    assert (await api.http.delete(f"{base}/blocks/no@acme.com", headers=admin)).status_code == 404
    bad = await api.http.delete(f"{base}/blocks/no%00one", headers=admin)
    assert bad.status_code in (400, 422) and bad.json()["code"] == "bad_request", bad.text
    body = draft(to=["no@acme.com"])
    still = await api.http.post("/v1/messages", json=body, headers=agent)
    assert still.json()["code"] == "recipient_suppressed"  # the other list still holds it
    assert (await api.http.delete(f"{base}/suppressions/no@acme.com", headers=admin)).status_code == 200
    sent = await api.http.post("/v1/messages", json=body, headers=agent)
    assert sent.status_code == 202, sent.text
    left = (await api.http.get(f"{base}/contacts", headers=admin)).json()["contacts"]
    assert [c["address"] for c in left] == ["gone@acme.com"]


async def test_reply_and_forward_are_materialized_from_recorded_inbound_mail(api: Api) -> None:
    project, agent, _ = await _setup(api)
    inbound = await api.http.post(
        f"/v1/admin/projects/{project}/inbound",
        json={
            "from": "vp@acme.com",
            "to": ["sales@us.example"],
            "subject": "Re: Re: Q3 pilot",
            "body_text": "Can we talk pricing?",
            "headers": {"Message-ID": "<abc@acme.com>"},
        },
        headers=api.admin,
    )
    assert inbound.status_code == 201, inbound.text
    parent = inbound.json()
    assert parent["message_id"].startswith("msg_") and parent["thread_ref"].startswith("thread_")
    reply = await api.http.post(
        f"/v1/messages/{parent['message_id']}/reply",
        json={"body_text": "Thursday 2pm?", "intent": draft()["intent"]},
        headers=agent,
    )
    assert reply.status_code == 202, reply.text
    review = reply.json()["review"]
    assert (review["kind"], review["subject"], review["to"]) == ("reply", "Re: Q3 pilot", ["vp@acme.com"])
    assert review["thread_ref"] == parent["thread_ref"] and review["from_address"] == "sales@us.example"
    forward = await api.http.post(
        f"/v1/messages/{parent['message_id']}/forward",
        json={"to": ["cfo@us.example"], "body_text": "FYI", "intent": draft()["intent"]},
        headers=agent,
    )
    assert forward.status_code == 202, forward.text
    review = forward.json()["review"]
    assert review["subject"] == "Fwd: Re: Re: Q3 pilot" and "thread_ref" not in review
    assert review["body_text"].startswith("FYI\n\n---------- Forwarded message ---------")
    assert review["body_text"].endswith("Can we talk pricing?")
    unknown = await api.http.post(
        "/v1/messages/msg_01JAAAAAAAAAAAAAAAAAAAAAAA/reply",
        json={"body_text": "x", "intent": draft()["intent"]},
        headers=agent,
    )
    assert unknown.status_code == 404


async def test_chat_is_idempotent_and_a_reused_key_with_another_body_conflicts(api: Api) -> None:
    _, agent, _ = await _setup(api)
    review_id = (await _send(api, agent))["review_id"]
    headers = {**agent, "Idempotency-Key": "chat-1"}
    first = await api.http.post(f"/v1/reviews/{review_id}/chat", json={"text": "ROI first?"}, headers=headers)
    again = await api.http.post(f"/v1/reviews/{review_id}/chat", json={"text": "ROI first?"}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert first.json()["turn"]["id"] == again.json()["turn"]["id"]
    assert first.json()["state"] == "needs_review"  # the agent's question does not open the draft
    other = await api.http.post(
        f"/v1/reviews/{review_id}/chat", json={"text": "Case study?"}, headers=headers
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"
    assert len((await _review(api, agent, review_id))["turns"]) == 1


async def test_redraft_keeps_or_clears_attachments_and_wrong_state_names_the_legal_verbs(api: Api) -> None:
    _, agent, human = await _setup(api)
    pdf = {
        "filename": "roi.pdf",
        "content_type": "application/pdf",
        "content_base64": base64.b64encode(b"%PDF").decode(),
    }
    review_id = (
        await _send(api, agent, attachments=[pdf], headers={"X-Campaign": "q3"}, reply_to="team@us.example")
    )["review_id"]
    kept = await api.http.post(
        f"/v1/reviews/{review_id}/revisions", json={"parent_revision": 1, "subject": "Q3, v2"}, headers=agent
    )
    assert kept.status_code == 200, kept.text
    assert kept.json()["revision"] == 2 and [a["filename"] for a in kept.json()["attachments"]] == ["roi.pdf"]
    assert kept.json()["headers"] == {"X-Campaign": "q3"} and kept.json()["reply_to"] == "team@us.example"
    cleared = await api.http.post(
        f"/v1/reviews/{review_id}/revisions", json={"parent_revision": 2, "attachments": []}, headers=agent
    )
    assert "attachments" not in cleared.json()
    token = (await api.http.get("/v1/rules", headers=agent)).json()["composition_token"]
    restamped = await api.http.post(
        f"/v1/reviews/{review_id}/restamp",
        json={"parent_revision": 3, "composition_token": token},
        headers=agent,
    )
    assert restamped.status_code == 200 and restamped.json()["revision"] == 3
    current = restamped.json()
    await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 3, "version": current["version"]}, headers=human
    )
    wrong = await api.http.post(
        f"/v1/reviews/{review_id}/restamp",
        json={"parent_revision": 3, "composition_token": token},
        headers=agent,
    )
    assert wrong.status_code == 409 and wrong.json()["code"] == "wrong_state"
    assert {
        ("state", "in_review"),
        ("allowed_action", "post_review_chat"),
        ("allowed_action", "cancel_review"),
    } <= _facts(wrong.json())
    assert ("allowed_action", "restamp_review") not in _facts(wrong.json())
    forbidden = await api.http.post(
        f"/v1/reviews/{review_id}/decision",
        json={"action": "approve", "revision": 3, "version": 1},
        headers=agent,
    )
    assert forbidden.status_code == 403  # approve is never an agent verb


async def test_a_human_reject_nudges_and_the_redraft_goes_back_to_the_queue(api: Api) -> None:
    _, agent, human = await _setup(api)
    review_id = (await _send(api, agent))["review_id"]
    opened = (
        await api.http.post(
            f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
        )
    ).json()
    rejected = await api.http.post(
        f"/v1/reviews/{review_id}/decision",
        json={"action": "reject", "revision": 1, "version": opened["version"], "feedback": "too soft"},
        headers=human,
    )
    assert rejected.json()["state"] == "rejected" and rejected.json()["revision"] == 2
    stale = await api.http.post(
        f"/v1/reviews/{review_id}/revisions", json={"parent_revision": 1, "body_text": "v2"}, headers=agent
    )
    assert stale.status_code == 409 and stale.json()["code"] == "stale"
    assert {("revision", "2"), ("allowed_action", "submit_revision")} <= _facts(stale.json())
    redraft = await api.http.post(
        f"/v1/reviews/{review_id}/revisions", json={"parent_revision": 2, "body_text": "v2"}, headers=agent
    )
    assert redraft.json()["state"] == "needs_review" and redraft.json()["revision"] == 3
    events = await events_until(api, agent, 1)
    assert [(e["reason"], e["payload"]["feedback"]) for e in events] == [("rejected", "too soft")]


async def test_the_policy_resolves_override_then_account_default_then_floor(api: Api) -> None:
    project = await api.project()
    agent = api.auth((await api.key(project["project_id"]))["api_key"])
    org_policy = f"/v1/admin/orgs/{project['org_id']}/review-policy"
    no_intent = draft()
    del no_intent["intent"]

    async def effective() -> tuple[str, str]:
        body = (await api.http.get("/v1/review-policy", headers=agent)).json()
        return body["policy"], body["source"]

    async def policy_hint() -> str:
        refused = await api.http.post("/v1/messages", json=no_intent, headers=agent)
        assert (refused.status_code, refused.json()["code"]) == (422, "intent_required"), refused.text
        return str({e.get("field"): e.get("detail") for e in refused.json()["errors"]}["policy"])

    assert await effective() == ("require_review", "floor")
    assert await policy_hint() == "require_review (source: floor)"
    forbidden = await api.http.put(org_policy, json={"policy": "allow_direct"}, headers=agent)
    assert forbidden.status_code == 403  # an agent never widens its own policy, at any rung
    account = await api.http.put(org_policy, json={"policy": "allow_direct"}, headers=api.admin)
    assert account.json() == {"policy": "allow_direct", "source": "account default"}
    assert await effective() == ("allow_direct", "account default")
    direct = await api.http.post("/v1/messages", json=no_intent, headers=agent)
    assert direct.status_code == 202 and direct.json()["status"] == "sent", direct.text

    override = await api.http.put(
        f"/v1/admin/projects/{project['project_id']}/review-policy",
        json={"policy": "require_review"},
        headers=api.admin,
    )
    assert override.json() == {
        "policy": "require_review",
        "source": "override",
        "require_composition_token": False,
    }
    assert await effective() == ("require_review", "override")
    assert await policy_hint() == "require_review (source: override)"
    # Another org's projects keep the floor.
    other = api.auth((await api.key((await api.project())["project_id"]))["api_key"])
    assert (await api.http.get("/v1/review-policy", headers=other)).json()["source"] == "floor"
