"""Issue 19 through the gateway: a category's M-of-N quorum of distinct approvers on the current
revision, and the review-agent deadline breaker (set on the risk dial, read in the decision context,
fired by review_state's own sweep)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from reviewloop.storage import make_engine
from sqlalchemy import text

from tests.conftest import Api, draft
from tests.e2e.helpers import events_until


class Panel:
    """A project with one category, its agent, three humans and a review agent."""

    def __init__(self, api: Api, project_id: str, category_id: str, keys: dict[str, dict[str, Any]]) -> None:
        self.api, self.project_id, self.category_id = api, project_id, category_id
        self.ids = {name: key["key_id"] for name, key in keys.items()}
        self.headers = {name: api.auth(key["api_key"]) for name, key in keys.items()}

    @classmethod
    async def create(cls, api: Api, **review_settings: Any) -> Panel:
        project_id = (await api.project())["project_id"]
        category = await api.http.post(
            f"/v1/admin/projects/{project_id}/categories",
            json={"name": "Sales", "description": "outreach"},
            headers=api.admin,
        )
        assert category.status_code in (200, 201), category.text
        category_id = category.json()["id"]
        dial = await api.http.put(
            f"/v1/admin/projects/{project_id}/risk-dial",
            json={"categories": [{"category_id": category_id, **review_settings}]},
            headers=api.admin,
        )
        assert dial.status_code == 200, dial.text
        kinds = {"agent": "agent", "a": "human", "b": "human", "c": "human", "reviewer": "review_agent"}
        keys = {name: await api.key(project_id, kind) for name, kind in kinds.items()}
        return cls(api, project_id, category_id, keys)

    async def submit(self) -> str:
        sent = await self.api.http.post(
            "/v1/messages", json=draft(category_id=self.category_id), headers=self.headers["agent"]
        )
        assert sent.status_code == 202, sent.text
        return str(sent.json()["review_id"])

    async def decide(self, who: str, review_id: str, review: dict[str, Any], **body: Any) -> Any:
        return await self.api.http.post(
            f"/v1/reviews/{review_id}/decision",
            json={"revision": review["revision"], "version": review["version"], **body},
            headers=self.headers[who],
        )


async def test_a_two_of_three_quorum_with_an_edit_needs_two_approvals_of_the_final_revision(api: Api) -> None:
    panel = await Panel.create(api, quorum_approvals=2)
    effective = (await api.http.get("/v1/risk-dial", headers=panel.headers["agent"])).json()["categories"]
    assert effective[0]["effective"]["quorum_approvals"] == 2
    review_id = await panel.submit()
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=panel.headers["a"]
    )
    first = await panel.decide("a", review_id, opened.json(), action="approve")
    assert first.status_code == 200, first.text
    assert (first.json()["state"], first.json()["revision"]) == ("in_review", 1)
    # The same approver again (a double click naming the same version) counts once.
    again = await panel.decide("a", review_id, opened.json(), action="approve")
    assert (again.status_code, again.json()["version"]) == (200, first.json()["version"])

    edited = await panel.decide(
        "b", review_id, first.json(), action="edit", body="Can you do Thursday 2pm?", feedback="a day"
    )
    assert edited.status_code == 200, edited.text
    assert (edited.json()["state"], edited.json()["revision"]) == ("in_review", 2)
    # The others see the edit with its diff; a's approval of revision 1 no longer counts.
    turns = (await api.http.get(f"/v1/reviews/{review_id}/turns", headers=panel.headers["c"])).json()
    (edit_turn,) = [t for t in turns["items"] if t.get("action") == "edit"]
    assert (edit_turn["actor_id"], edit_turn["revision"]) == (panel.ids["b"], 2)
    assert edit_turn["diff_json"]["fields_changed"] == ["body_text"]
    feedback = (
        await api.http.get(f"/v1/reviews/{review_id}/feedback", headers=panel.headers["agent"])
    ).json()
    assert feedback["approvers"] == [panel.ids["b"]]

    final = await panel.decide("a", review_id, edited.json(), action="approve")
    assert final.status_code == 200, final.text
    assert (final.json()["state"], final.json()["body_text"]) == ("sent", "Can you do Thursday 2pm?")
    feedback = (
        await api.http.get(f"/v1/reviews/{review_id}/feedback", headers=panel.headers["agent"])
    ).json()
    assert (feedback["decision"], feedback["approvers"]) == ("edited", [panel.ids["b"], panel.ids["a"]])
    events = await events_until(api, panel.headers["agent"], 1)
    (sent,) = [e for e in events if e.get("review_id") == review_id]
    assert (sent["reason"], sent["payload"]["decision"]) == ("sent", "edited")
    assert sent["payload"]["approvers"] == [panel.ids["b"], panel.ids["a"]]

    # A third approver after the quorum gets the terminal answer.
    late = await panel.decide("c", review_id, final.json(), action="approve")
    assert (late.status_code, late.json()["code"]) == (409, "terminal"), late.text


async def test_a_panel_of_two_refuses_a_third_human_and_m_above_n_is_refused(api: Api) -> None:
    panel = await Panel.create(api, quorum_approvals=2, quorum_panel=2)
    review_id = await panel.submit()
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=panel.headers["a"]
    )
    first = await panel.decide("a", review_id, opened.json(), action="approve")
    edited = await panel.decide("b", review_id, first.json(), action="edit", body="Can you do Thursday 2pm?")
    assert edited.status_code == 200, edited.text
    late = await panel.decide("c", review_id, edited.json(), action="approve")
    assert late.status_code == 403, late.text
    assert late.headers["content-type"].startswith("application/problem+json")
    problem = late.json()
    assert problem["code"] == "forbidden_scope" and "panel is full" in problem["detail"]
    hints = [(e["field"], e["detail"]) for e in problem["errors"]]
    assert ("reason", "quorum_panel_full") in hints
    assert [d for f, d in hints if f == "panel_member"] == [panel.ids["a"], panel.ids["b"]]
    review = (await api.http.get(f"/v1/reviews/{review_id}", headers=panel.headers["agent"])).json()
    assert review["version"] == edited.json()["version"]  # nothing written
    final = await panel.decide("a", review_id, edited.json(), action="approve")
    assert final.status_code == 200 and final.json()["state"] == "sent", final.text

    # M above N, on the category or through the account's values it inherits, is refused whole.
    url = f"/v1/admin/projects/{panel.project_id}/risk-dial"
    for body, pointer in (
        (
            {"categories": [{"category_id": panel.category_id, "quorum_approvals": 3, "quorum_panel": 2}]},
            "/categories/0/quorum_panel",
        ),
        (
            {
                "account": {"quorum_panel": 1},
                "categories": [{"category_id": panel.category_id, "quorum_approvals": 2}],
            },
            "/categories/0/quorum_panel",
        ),
    ):
        refused = await api.http.put(url, json=body, headers=api.admin)
        assert refused.status_code in (400, 422) and refused.json()["code"] == "bad_request", refused.text
        assert refused.json()["errors"][0]["field"] == pointer
    dial = (await api.http.get("/v1/risk-dial", headers=panel.headers["agent"])).json()
    (category,) = dial["categories"]
    assert (category["effective"]["quorum_approvals"], category["effective"]["quorum_panel"]) == (2, 2)
    assert dial["account"]["quorum_panel"] == 0


async def test_approvals_racing_for_the_last_slot_deliver_once(api: Api) -> None:
    panel = await Panel.create(api, quorum_approvals=2)
    review_id = await panel.submit()
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=panel.headers["a"]
    )
    first = (await panel.decide("a", review_id, opened.json(), action="approve")).json()
    racing = await asyncio.gather(
        panel.decide("b", review_id, first, action="approve"),
        panel.decide("c", review_id, first, action="approve"),
    )
    assert sorted(r.status_code for r in racing) == [200, 409], [r.text for r in racing]
    (won,) = [r.json() for r in racing if r.status_code == 200]
    assert won["state"] == "sent"
    events = await events_until(api, panel.headers["agent"], 1)
    assert [e["reason"] for e in events if e.get("review_id") == review_id] == ["sent"]


async def _move_deadline_into_the_past(api: Api, review_id: str) -> None:
    """The clock passing the deadline, without a wait: review_state's stored deadline moves back."""
    engine = make_engine(api.stack.env["REVIEWLOOP_REVIEW_STATE_DB"])
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE reviews SET review_deadline = :past WHERE id = :id"),
                {"past": datetime.now(UTC) - timedelta(minutes=1), "id": review_id},
            )
    finally:
        await engine.dispose()


async def test_the_review_deadline_forces_the_draft_to_a_human_once(api: Api) -> None:
    panel = await Panel.create(api, review_deadline_minutes=30)
    review_id = await panel.submit()
    url = f"/v1/reviews/{review_id}/decision-context"
    context = (await api.http.get(url, headers=panel.headers["reviewer"])).json()
    deadline = datetime.fromisoformat(context["review_deadline"])
    assert timedelta(minutes=29) < deadline - datetime.now(UTC) <= timedelta(minutes=30)
    assert (context["force_to_human"], context.get("force_reason"), context["deadline_passed"]) == (
        False,
        None,
        False,
    )

    await _move_deadline_into_the_past(api, review_id)
    # Breaker (b) has tripped the moment the deadline passed, before any sweep forced the draft.
    context = (await api.http.get(url, headers=panel.headers["reviewer"])).json()
    assert (context["force_to_human"], context["force_reason"], context["hop_count"]) == (
        True,
        "review_deadline_passed",
        0,
    )
    assert (context["deadline_passed"], context["hops_exhausted"]) == (True, False)
    assert (await _forced(api, panel, review_id))["force_reason"] == "review_deadline_passed"
    review = (await api.http.get(f"/v1/reviews/{review_id}", headers=panel.headers["agent"])).json()
    late = await panel.decide("reviewer", review_id, review, action="approve")
    assert late.status_code == 200, late.text
    assert (late.json()["kind"], late.json()["forced_by_breaker"]) == (
        "sent_to_human",
        "review_deadline_passed",
    )
    events = await events_until(api, panel.headers["agent"], 1)
    mine = [e for e in events if e.get("review_id") == review_id]
    assert [(e["reason"], e["payload"]["forced_by_breaker"]) for e in mine] == [
        ("redraft_requested", "review_deadline_passed")
    ]
    # The human queue has it, and a human releases it.
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open",
        json={"revision": review["revision"], "version": review["version"]},
        headers=panel.headers["a"],
    )
    assert opened.status_code == 200, opened.text
    approved = await panel.decide("a", review_id, opened.json(), action="approve")
    assert approved.json()["state"] == "sent", approved.text


async def _forced(api: Api, panel: Panel, review_id: str) -> dict[str, Any]:
    """The decision context once review_state's sweep (every replica runs one) forced the draft."""
    url = f"/v1/reviews/{review_id}/decision-context"
    until = time.monotonic() + 30
    while True:
        context: dict[str, Any] = (await api.http.get(url, headers=panel.headers["reviewer"])).json()
        if context["review"].get("gate_outcome") == "held:review_deadline_passed" or time.monotonic() > until:
            return context
        await asyncio.sleep(0.2)


async def test_a_redraft_restarts_the_review_deadline_from_the_redraft(api: Api) -> None:
    panel = await Panel.create(api, review_deadline_minutes=30)
    review_id = await panel.submit()
    await _move_deadline_into_the_past(api, review_id)
    assert (await _forced(api, panel, review_id))["force_reason"] == "review_deadline_passed"

    redraft = await api.http.post(
        f"/v1/reviews/{review_id}/revisions",
        json={"parent_revision": 1, "body_text": "Can you do Thursday 2pm?"},
        headers=panel.headers["agent"],
    )
    assert redraft.status_code == 200, redraft.text
    url = f"/v1/reviews/{review_id}/decision-context"
    context = (await api.http.get(url, headers=panel.headers["reviewer"])).json()
    assert (context["force_to_human"], context.get("force_reason")) == (False, None)
    deadline = datetime.fromisoformat(context["review_deadline"])
    assert timedelta(minutes=29) < deadline - datetime.now(UTC) <= timedelta(minutes=30)

    # The new revision's window passes too: the sweep forces the draft again, once.
    await _move_deadline_into_the_past(api, review_id)
    assert (await _forced(api, panel, review_id))["force_reason"] == "review_deadline_passed"
    events = await events_until(api, panel.headers["agent"], 2)
    assert [
        (e["reason"], e["payload"]["forced_by_breaker"]) for e in events if e["review_id"] == review_id
    ] == [
        ("redraft_requested", "review_deadline_passed"),
        ("redraft_requested", "review_deadline_passed"),
    ]


async def test_a_quorum_or_deadline_out_of_range_is_refused_and_changes_nothing(api: Api) -> None:
    panel = await Panel.create(api, quorum_approvals=2)
    url = f"/v1/admin/projects/{panel.project_id}/risk-dial"
    for bad in ({"quorum_approvals": 0}, {"review_deadline_minutes": -5}, {"quorum_approvals": 1.5}):
        refused = await api.http.put(
            url, json={"categories": [{"category_id": panel.category_id, **bad}]}, headers=api.admin
        )
        assert refused.status_code in (400, 422), refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert refused.json()["code"] == "bad_request"
    dial = (await api.http.get("/v1/risk-dial", headers=panel.headers["agent"])).json()
    (category,) = dial["categories"]
    assert (category["quorum_approvals"], category["effective"]["review_deadline_minutes"]) == (2, 0)
