"""Issue 38: an undone approval leaves a held draft held. A draft a newly saved rule holds, approved by a
human as it stands (``override_held``) and undone inside the undo window, is held again exactly as before:
its category's pacing says so, a plain approve is refused ``born_stale`` as it was, and approving it as
it stands works again. An undone edit-and-approve of a held draft leaves it held too, and an undone
approval of a draft no rule held changes nothing there. Through the gateway, as an agent and a human;
last, the undo's one unit of work, cancelled at each of its round trips."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from review_state import app
from review_state.app import Decision, Env
from review_state.domain.review import Review

from tests.cancellation import Attempt, count, each_await, observer
from tests.conftest import BACKENDS, Api, Databases, draft, start_stack
from tests.review_state.conftest import AGENT, DRAFT, HUMAN, peers
from tests.review_state.test_ingest import _event, _general_rule

RULE = "Offer a time, never ask for one."
WINDOW_S = 60.0  # wide: the undo must land inside it on a loaded box; nothing here waits it out


@pytest.fixture(scope="module", params=BACKENDS)
async def wapi(
    request: pytest.FixtureRequest, databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Api]:
    """A stack whose reviewers' releases wait out an undo window."""
    backend = str(request.param)
    stack = await start_stack(
        databases,
        backend,
        tmp_path_factory.mktemp(f"undo-hold-{backend}"),
        {"REVIEWLOOP_UNDO_WINDOW_S": str(WINDOW_S)},
    )
    api = Api(stack)
    yield api
    await api.http.aclose()
    stack.stop_all()


async def _project(api: Api) -> tuple[dict[str, Any], dict[str, str], dict[str, str], str]:
    """A project with an agent and a human key and one category, refilled without a minimum interval."""
    project = await api.project()
    pid = project["project_id"]
    agent = api.auth((await api.key(pid, "agent"))["api_key"])
    human = api.auth((await api.key(pid, "human"))["api_key"])
    category = await api.http.post(
        f"/v1/admin/projects/{pid}/categories", json={"name": "Outreach"}, headers=api.admin
    )
    assert category.status_code == 201, category.text
    pacing = await api.http.put(
        f"/v1/admin/projects/{pid}/pacing", json={"nudge_min_interval_ms": 0}, headers=api.admin
    )
    assert pacing.status_code == 200, pacing.text
    return project, agent, human, category.json()["id"]


async def _submit(api: Api, agent: dict[str, str], category_id: str) -> str:
    sent = await api.http.post("/v1/messages", json=draft(category_id=category_id), headers=agent)
    assert sent.status_code == 202, sent.text
    return str(sent.json()["review_id"])


async def _pacing(api: Api, agent: dict[str, str], category_id: str) -> dict[str, Any]:
    response = await api.http.get(f"/v1/categories/{category_id}/pacing", headers=agent)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _place(pacing: dict[str, Any], review_id: str) -> dict[str, Any]:
    """What the category's pacing says of a draft and of its window: the draft's item (its place: held
    and nudged, held and waiting, or fresh), how many drafts are held, redrafting, released."""
    [item] = [i for i in pacing["items"] if i["review_id"] == review_id]
    counts = ("stale", "redrafting", "released_count", "rule_high_water", "next_review_ids")
    return {"item": item, **{name: pacing[name] for name in counts}}


async def _open(api: Api, human: dict[str, str], review_id: str) -> dict[str, Any]:
    opened = await api.http.post(
        f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
    )
    assert opened.status_code == 200, opened.text
    return dict(opened.json())


async def _decide(api: Api, human: dict[str, str], review: dict[str, Any], **body: Any) -> Any:
    return await api.http.post(
        f"/v1/reviews/{review['id']}/decision",
        json={"action": "approve", "revision": review["revision"], "version": review["version"], **body},
        headers=human,
    )


async def _undo(api: Api, human: dict[str, str], approved: dict[str, Any]) -> dict[str, Any]:
    assert approved["state"] == "approved" and approved["undo_until"], approved
    undone = await api.http.post(
        f"/v1/reviews/{approved['id']}/undo",
        json={"revision": approved["revision"], "version": approved["version"]},
        headers=human,
    )
    assert undone.status_code == 200, undone.text
    return dict(undone.json())


async def _hold(
    api: Api, project: dict[str, Any], agent: dict[str, str], category_id: str, place: str
) -> None:
    """A newly saved rule holds the category's drafts: a general rule nudges them (``in_window_redrafting``,
    each in a slot); a category rule saved with ``propagate_to_pending: false`` never does (``ahead``)."""
    if place == "in_window_redrafting":
        rule = await api.http.post(
            f"/v1/admin/orgs/{project['org_id']}/rules", json={"rule_text": RULE}, headers=api.admin
        )
    else:
        body = {
            "rule_text": RULE,
            "scope": "category",
            "category_id": category_id,
            "propagate_to_pending": False,
        }
        rule = await api.http.post("/v1/rules", json=body, headers=agent)
    assert rule.status_code == 201, rule.text
    deadline = time.monotonic() + 20
    while not _settled(await _pacing(api, agent, category_id), place):  # the rule crosses two outboxes
        assert time.monotonic() < deadline, "the rule never held the draft"
        await asyncio.sleep(0.1)


def _settled(pacing: dict[str, Any], place: str) -> bool:
    """The rule holds its drafts, and a nudged rule's have been given their slots (the refill runs after
    the rule's commit, so "held" is seen a moment before "nudged")."""
    waiting = any(i["state"] == "ahead" for i in pacing["items"])
    return pacing["stale"] > 0 and (place == "ahead" or not waiting)


@pytest.mark.parametrize("place", ["in_window_redrafting", "ahead"])
@pytest.mark.parametrize("decision", ["approve", "edit"])
async def test_an_undone_release_of_a_held_draft_leaves_it_held_as_before(
    wapi: Api, decision: str, place: str
) -> None:
    project, agent, human, category_id = await _project(wapi)
    review_id = await _submit(wapi, agent, category_id)
    await _hold(wapi, project, agent, category_id, place)
    opened = await _open(wapi, human, review_id)
    held = _place(await _pacing(wapi, agent, category_id), review_id)
    assert held["item"]["state"] == place and held["stale"] == 1
    refused = await _decide(wapi, human, opened)
    assert (refused.status_code, refused.json()["code"]) == (409, "born_stale"), refused.text

    if decision == "approve":
        released = await _decide(wapi, human, opened, override_held=True)
    else:
        released = await _decide(wapi, human, opened, action="edit", body="Would Thursday at 2pm work?")
    assert released.status_code == 200, released.text
    assert (await _pacing(wapi, agent, category_id))["stale"] == 0  # the release took the hold
    back = await _undo(wapi, human, released.json())
    assert (back["state"], back["revision"]) == ("in_review", 1)

    # Held again, exactly as before the release.
    assert _place(await _pacing(wapi, agent, category_id), review_id) == held
    again = await _decide(wapi, human, back)
    assert (again.status_code, again.json()["code"]) == (409, "born_stale"), again.text
    read = (await wapi.http.get(f"/v1/reviews/{review_id}", headers=human)).json()
    assert [t["turn_type"] for t in read["turns"]][-2:] == ["decision", "undo"]
    assert read["turns"][-1]["actor_kind"] == "human" and read["version"] == back["version"]
    overridden = await _decide(wapi, human, back, override_held=True)
    assert overridden.status_code == 200, overridden.text
    assert overridden.json()["state"] == "approved"


async def test_an_undone_approval_of_a_draft_no_rule_holds_leaves_it_free(wapi: Api) -> None:
    _, agent, human, category_id = await _project(wapi)
    review_id = await _submit(wapi, agent, category_id)
    opened = await _open(wapi, human, review_id)
    fresh = _place(await _pacing(wapi, agent, category_id), review_id)
    assert fresh["item"]["state"] == "in_window_fresh" and fresh["stale"] == 0
    back = await _undo(wapi, human, (await _decide(wapi, human, opened)).json())
    assert _place(await _pacing(wapi, agent, category_id), review_id) == fresh
    again = await _decide(wapi, human, back)
    assert again.status_code == 200 and again.json()["state"] == "approved", again.text


async def test_an_undo_of_a_held_draft_cancelled_at_any_round_trip_holds_it_again_once(env: Env) -> None:
    """The undo and the hold it puts back are one unit: cancelled anywhere, the release still stands
    (and its retry undoes it) or the draft is held again, never half of it."""
    env.settings = replace(env.settings, undo_window_s=60)
    peers(env).pacing = {"lookahead_window": 3, "rework_batch_max": 10, "nudge_min_interval_ms": 0}
    seen = await observer(env.db)

    async def attempt() -> Attempt[Review]:
        category = f"cat_{uuid.uuid4().hex[:8]}"
        _, review = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id=category, idempotency_key="")
        )
        rule = _general_rule(9, scope="category", category_id=category, project_id="prj_1")
        await app.ingest(env, [_event("rule_changed", rule, f"evt_{category}")])
        review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
        decision = Decision("approve", review.revision, review.version, override_held=True)
        approved = await app.decide(env, HUMAN, review.id, decision)
        key = uuid.uuid4().hex

        async def call() -> Review:
            return await app.undo_decision(env, HUMAN, review.id, approved.revision, approved.version, key)

        async def verify(answer: Review) -> None:
            ids = {"r": review.id, "c": category}
            assert await count(
                seen, "SELECT count(*) FROM reviews WHERE id = :r AND state = 'in_review'", **ids
            )
            assert not await count(seen, "SELECT count(*) FROM delivery_attempts WHERE review_id = :r", **ids)
            held = "SELECT count(*) FROM stale_drafts WHERE review_id = :r AND required_high_water = 9"
            assert await count(seen, held + " AND nudged_at IS NOT NULL", **ids) == 1
            released = "SELECT cursor_advanced_count FROM pacing_windows WHERE category_id = :c"
            assert await count(seen, released, **ids) == 0
            again = await call()
            assert (again.state, again.version) == (answer.state, answer.version)  # the replay

        return Attempt(call, verify)

    try:
        assert await each_await(env.db, attempt) >= 2
    finally:
        await seen.dispose()
