"""Issue 38: a rule saved while an approval waits out its undo window holds the draft its undo puts back.
The draft was not pending when the rule landed (it was approved), so only the undo brings it back to the
queue, and it comes back composed under the older rules: held exactly like every other pending draft of
the rule's reach (its category's pacing says so, a plain approve is refused ``born_stale``, approving it
as it stands works, and its agent is nudged as the rule's save said). A rule out of its reach holds
nothing. Through the gateway, as an agent and a human; then in the use cases: a release the rule found
waiting that goes to delivery leaves no hold behind, and the rule's unit cancelled at each of its round
trips keeps the hold for the undo once."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from typing import Any

import pytest
from review_state import app
from review_state.app import Decision, Env
from review_state.app.ingest import SUBSCRIPTIONS
from review_state.domain.machine import State
from review_state.domain.pacing import StaleDraft
from review_state.domain.review import Review
from review_state.domain.undo import held_again, held_later, released_hold, snapshot
from review_state.store import pacing as paced
from reviewloop.storage import utcnow
from reviewloop.storage.inbox import ingest_each

from tests.cancellation import Attempt, count, each_await, observer
from tests.conftest import Api
from tests.review_state.conftest import AGENT, DRAFT, HUMAN, peers, provider
from tests.review_state.test_ingest import _event, _general_rule
from tests.review_state.test_undo_hold import (  # noqa: F401  (``wapi``: the stack with a 60 s window)
    _decide,
    _hold,
    _open,
    _pacing,
    _place,
    _project,
    _submit,
    _undo,
    wapi,
)


async def _nudges(api: Api, agent: dict[str, str], review_id: str) -> list[str]:
    listed = await api.http.get("/v1/review-events", params={"limit": 100}, headers=agent)
    assert listed.status_code == 200, listed.text
    return [e["reason"] for e in listed.json()["events"] if e.get("review_id") == review_id]


@pytest.mark.parametrize("place", ["in_window_redrafting", "ahead"])
async def test_a_rule_saved_while_an_approval_waits_holds_the_draft_its_undo_puts_back(
    wapi: Api,  # noqa: F811
    place: str,
) -> None:
    project, agent, human, category_id = await _project(wapi)
    review_id = await _submit(wapi, agent, category_id)
    other = await _submit(wapi, agent, category_id)  # pending when the rule lands: held by it
    opened = await _open(wapi, human, review_id)
    approved = await _decide(wapi, human, opened)
    assert approved.status_code == 200, approved.text
    await _hold(wapi, project, agent, category_id, place)  # a general rule, or a category one never nudged
    pacing = await _pacing(wapi, agent, category_id)
    assert review_id not in {i["review_id"] for i in pacing["items"]} and pacing["stale"] == 1
    held = _place(pacing, other)["item"]
    assert held["state"] == place

    back = await _undo(wapi, human, approved.json())
    assert (back["state"], back["revision"]) == ("in_review", 1)
    deadline = time.monotonic() + 20
    while (item := _place(await _pacing(wapi, agent, category_id), review_id)["item"])["state"] != place:
        assert item["state"] == "ahead", item  # waiting its slot, which the pacing sweep gives it
        assert time.monotonic() < deadline, "the undone draft was never given its slot"
        await asyncio.sleep(0.1)
    assert item == {**held, "review_id": review_id}  # held against the same rule, like the other draft
    pacing = await _pacing(wapi, agent, category_id)
    assert (pacing["stale"], pacing["rule_high_water"]) == (2, held["required_high_water"])
    refused = await _decide(wapi, human, back)
    assert (refused.status_code, refused.json()["code"]) == (409, "born_stale"), refused.text
    if place == "in_window_redrafting":  # its agent is owed the nudge the rule's save asked for
        deadline = time.monotonic() + 20
        while "propagate_general_rule" not in await _nudges(wapi, agent, review_id):
            assert time.monotonic() < deadline, "the undone draft's agent was never nudged"
            await asyncio.sleep(0.1)
    overridden = await _decide(wapi, human, back, override_held=True)
    assert overridden.status_code == 200, overridden.text
    assert overridden.json()["state"] == "approved"


async def test_a_rule_out_of_reach_saved_while_an_approval_waits_holds_nothing(
    wapi: Api,  # noqa: F811
) -> None:
    """The control: a category rule of another category lands in the window; the undone draft is free."""
    project, agent, human, category_id = await _project(wapi)
    elsewhere = await wapi.http.post(
        f"/v1/admin/projects/{project['project_id']}/categories", json={"name": "Billing"}, headers=wapi.admin
    )
    assert elsewhere.status_code == 201, elsewhere.text
    review_id = await _submit(wapi, agent, category_id)
    await _submit(wapi, agent, elsewhere.json()["id"])  # the rule's reach: held once it lands
    opened = await _open(wapi, human, review_id)
    approved = await _decide(wapi, human, opened)
    assert approved.status_code == 200, approved.text
    await _hold(wapi, project, agent, elsewhere.json()["id"], "ahead")

    back = await _undo(wapi, human, approved.json())
    fresh = _place(await _pacing(wapi, agent, category_id), review_id)
    assert fresh["item"]["state"] == "in_window_fresh" and fresh["stale"] == 0
    again = await _decide(wapi, human, back)
    assert again.status_code == 200 and again.json()["state"] == "approved", again.text


# --- in the use cases ------------------------------------------------------------------------------


async def _approved_in_window(env: Env, window_s: float) -> tuple[str, str, Any]:
    """A category with a draft approved (its release waiting ``window_s``) and a pending one."""
    env.settings = replace(env.settings, undo_window_s=window_s)
    peers(env).pacing = {"lookahead_window": 3, "rework_batch_max": 10, "nudge_min_interval_ms": 0}
    category = f"cat_{uuid.uuid4().hex[:8]}"
    request = app.SubmitRequest(kind="send", draft=DRAFT, category_id=category, idempotency_key="")
    _, review = await app.submit(env, AGENT, request)
    await app.submit(env, AGENT, request)
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    approved = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert approved.state is State.APPROVED
    return category, review.id, approved


def _rule(category: str, high_water: int) -> Any:
    rule = _general_rule(high_water, scope="category", category_id=category, project_id="prj_1")
    return _event("rule_changed", rule, f"evt_{category}_{high_water}")


async def test_a_release_the_rule_found_waiting_goes_out_and_leaves_no_hold(env: Env) -> None:
    category, review_id, _ = await _approved_in_window(env, 1.0)
    await app.ingest(env, [_rule(category, 9)])
    deadline = time.monotonic() + 20
    while (await app.read_review(env, HUMAN, review_id))[0].state is not State.SENT:
        assert time.monotonic() < deadline, "the release never went out"
        await asyncio.sleep(0.05)
    assert len(list(provider(env).directory.glob("*.eml"))) == 1
    state = await app.pacing_state(env, HUMAN, category)
    # Only the draft that was pending is held; the delivered one holds no slot and counts nowhere.
    assert [(r.id != review_id, s is not None) for r, s in state.drafts] == [(True, True)]
    async with env.db.engine.connect() as conn:
        assert await paced.counts(conn, "prj_1", category) == (1, 1)
        assert await paced.required_high_water(conn, review_id) is None


async def test_a_rule_cancelled_at_any_round_trip_holds_the_waiting_release_once(env: Env) -> None:
    """The rule's unit cancelled anywhere: the event is handled (the hold kept for the undo) or not at
    all, and its redelivery handles it once; the undo then puts the hold back once."""
    seen = await observer(env.db)

    async def attempt() -> Attempt[tuple[int, int]]:
        category, review_id, approved = await _approved_in_window(env, 60)
        event = _rule(category, 9)

        async def call() -> tuple[int, int]:  # the event's unit alone (not the refill after it)
            done = await ingest_each(env.db, [event], SUBSCRIPTIONS)
            return done.accepted, done.duplicates

        async def verify(answer: tuple[int, int]) -> None:
            assert answer in ((1, 0), (0, 1))  # handled by the retry, or by the cancelled call
            assert await app.ingest(env, [event]) == (0, 1)  # any redelivery after: a duplicate
            back = await app.undo_decision(env, HUMAN, review_id, approved.revision, approved.version)
            assert back.state is State.IN_REVIEW
            held = "SELECT count(*) FROM stale_drafts WHERE review_id = :r AND required_high_water = 9"
            assert await count(seen, held, r=review_id) == 1
            assert (
                await count(seen, "SELECT count(*) FROM stale_drafts WHERE category_id = :c", c=category) == 2
            )

        return Attempt(call, verify)

    try:
        assert await each_await(env.db, attempt) >= 2
    finally:
        await seen.dispose()


def test_a_rule_in_the_window_raises_the_hold_the_release_took_and_keeps_its_slot() -> None:
    """Pure: the snapshot keeps one hold, at the latest rule. One the release took (an override) keeps
    its place in the window and its release comes off the window's count at the undo; one that came
    in the window waits for a slot and was never counted released; an older rule changes nothing."""
    nudged = utcnow()
    took = StaleDraft("rr_1", "prj_1", "cat_a", 5, {"id": "rule_0"}, "rule_changed", True, 0, nudged)
    later = replace(took, required_high_water=9, rule={"id": "rule_1"}, reason="propagate_general_rule")
    review = Review(
        id="rr_1",
        org_id="org_1",
        project_id="prj_1",
        agent_id="agt_1",
        category_id="cat_a",
        kind="send",
        state=State.IN_REVIEW,
        revision=1,
        version=2,
        to=["a@b.c"],
        cc=[],
        bcc=[],
        subject="s",
        body_text="b",
        intent=None,
        created_at=nudged,
        updated_at=nudged,
        from_address="x@y.z",
    )
    kept = snapshot(review, took)
    raised = held_later(kept, replace(later, nudged_at=None))
    assert raised is not None and released_hold(raised)
    assert held_again(raised, review) == later  # the new rule, the old slot
    assert held_later(raised, replace(later, required_high_water=7)) is None
    arrived = held_later(snapshot(review), replace(later, nudged_at=None))
    assert arrived is not None and not released_hold(arrived)
    assert held_again(arrived, review) == replace(later, nudged_at=None)
