"""Mail an agent may not forge (issue 36): a header that claims the sender's identity, the message's route
or its authentication is the deployment's. Through the gateway, each is refused 422 naming it; the
headers an agent may set (the allow-list of review_state's domain) still pass."""

from __future__ import annotations

import pytest

from tests.conftest import Api, draft

FORBIDDEN = [
    "Sender",
    "Resent-From",
    "Resent-To",
    "Resent-Cc",
    "Resent-Sender",
    "Resent-Date",
    "Resent-Message-ID",
    "Return-Path",
    "Received",
    "Authentication-Results",
    "DKIM-Signature",
    "ARC-Seal",
    "ARC-Message-Signature",
    "ARC-Authentication-Results",
    "Received-SPF",
    "Delivered-To",
    "Envelope-To",
    "Disposition-Notification-To",
    "X-Original-From",
    "X-Sender",
    "X-Forwarded-For",
    "X-Originating-IP",
    "X-Google-DKIM-Signature",
    "x-ms-exchange-organization-authas",  # any spelling
]


@pytest.mark.parametrize("name", FORBIDDEN)
async def test_a_header_claiming_identity_routing_or_authentication_is_refused_naming_it(
    api: Api, name: str
) -> None:
    agent = await api.agent()
    refused = await api.http.post("/v1/messages", json=draft(headers={name: "forged"}), headers=agent)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["code"] == "bad_request"
    assert name in problem["detail"]
    assert [e["field"] for e in problem["errors"]] == [f"/headers/{name}"]
    # Nothing was queued: the agent's review list is empty.
    assert (await api.http.get("/v1/reviews", headers=agent)).json()["items"] == []


async def test_a_redraft_cannot_add_a_forbidden_header_either(api: Api) -> None:
    agent = await api.agent()
    submitted = await api.http.post("/v1/messages", json=draft(), headers=agent)
    assert submitted.status_code == 202, submitted.text
    review_id = submitted.json()["review_id"]
    refused = await api.http.post(
        f"/v1/reviews/{review_id}/revisions",
        json={"parent_revision": 1, "body_text": "Hi again", "headers": {"DKIM-Signature": "v=1; a=x"}},
        headers=agent,
    )
    assert refused.status_code == 422, refused.text
    assert "DKIM-Signature" in refused.json()["detail"]


async def test_the_headers_an_agent_may_set_pass(api: Api) -> None:
    agent = await api.agent()
    allowed = {
        "X-Campaign": "q3",
        "List-Unsubscribe": "<mailto:unsubscribe@us.example>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        "Importance": "high",
        "Keywords": "pilot",
    }
    sent = await api.http.post("/v1/messages", json=draft(headers=allowed), headers=agent)
    assert sent.status_code == 202, sent.text
    assert sent.json()["review"]["headers"] == allowed
