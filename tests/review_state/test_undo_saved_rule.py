"""Issue 38: undoing an edit-and-approve takes back the rule it saved. The decision's ``new_rule`` is
saved by the rules context through review_state's outbox; the undo sends, through the same outbox and
after it, the rule's withdrawal: the rules context undoes its lineage (a retired rev, action ``undone``)
while that rule is still the lineage's head, and review_state lifts the holds it took, so the other
pending drafts of its reach are free again. A rule someone changed since is theirs and stays. Through
the gateway as an agent and a human; then in the rules context: a withdrawal that reaches it with the
save it names (the undo came before the save arrived) still ends withdrawn, and a redelivered or
repeated withdrawal changes nothing twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from review_state import app
from review_state.app import Decision, Env
from reviewloop.common.v1 import common_pb2
from reviewloop.ids import new_id
from reviewloop.review.v1.events_pb2 import RuleWithdrawn
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, codec
from rules import app as rules_app
from rules import store
from rules.__main__ import SPEC

from tests.conftest import Api
from tests.review_state.conftest import AGENT, HUMAN, opened, outbox, peers
from tests.review_state.test_undo_hold import (  # noqa: F401  (``wapi``: the stack with a 60 s window)
    _decide,
    _open,
    _pacing,
    _place,
    _project,
    _submit,
    _undo,
    wapi,
)
from tests.rules.test_app import SETTINGS, Tenant
from tests.rules.test_categories import _requested, ingest

RULE = {"rule_text": "Always propose a concrete time.", "scope": "general"}


async def _until(what: str, check: Callable[[], Awaitable[Any]]) -> Any:
    """``check()``'s answer once it is truthy (the rule crosses two outboxes)."""
    deadline = time.monotonic() + 20
    while not (answer := await check()):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)
    return answer


async def _active(api: Api, headers: dict[str, str], text: str) -> dict[str, Any] | None:
    """The rule saying ``text`` if it is in the project's active stack."""
    rules = (await api.http.get("/v1/rules", headers=headers)).json()["items"]
    return next((r for r in rules if r["rule_text"] == text), None)


async def _history(api: Api, headers: dict[str, str], lineage_id: str) -> list[tuple[int, str, str]]:
    read = await api.http.get(f"/v1/rules/{lineage_id}/history", headers=headers)
    assert read.status_code == 200, read.text
    return [(r["rev"], r["status"], r["action"]) for r in read.json()["revisions"]]


async def _edit_with_rule(
    api: Api, human: dict[str, str], review: dict[str, Any], rule: dict[str, str]
) -> Any:
    edited = await _decide(
        api, human, review, action="edit", body="Would Thursday at 2pm work?", new_rule=rule
    )
    assert edited.status_code == 200, edited.text
    return edited.json()


async def _last_turn(api: Api, human: dict[str, str], review_id: str) -> dict[str, Any]:
    return dict((await api.http.get(f"/v1/reviews/{review_id}", headers=human)).json()["turns"][-1])


async def test_an_undone_edit_and_approve_takes_back_the_rule_it_saved(wapi: Api) -> None:  # noqa: F811
    _, agent, human, category_id = await _project(wapi)
    review_id = await _submit(wapi, agent, category_id)
    other = await _submit(wapi, agent, category_id)  # pending: the new rule holds it
    edited = await _edit_with_rule(wapi, human, await _open(wapi, human, review_id), RULE)
    rule = await _until("the rule was never saved", lambda: _active(wapi, agent, RULE["rule_text"]))
    rule_id = rule["id"]
    await _until(
        "the rule never held the other draft",
        lambda: _pacing_held(wapi, agent, category_id, other),
    )

    back = await _undo(wapi, human, edited)
    assert (back["state"], back["revision"]) == ("in_review", 1)
    undo = await _last_turn(wapi, human, review_id)
    assert undo["turn_type"] == "undo" and f"The rule it saved ({rule_id}) is taken back" in undo["body"]
    # The rule is undone as the console's Undo leaves a creation: retired, by the human who undid.
    await _until(
        "the rule was never taken back",
        lambda: _is(
            _history(wapi, human, rule["lineage_id"]),
            [(1, "superseded", "created"), (2, "retired", "undone")],
        ),
    )
    assert await _active(wapi, agent, RULE["rule_text"]) is None
    # The drafts it held are free: the other one, and the undone one approves as it stands.
    await _until("the other draft stayed held", lambda: _not(_pacing_held(wapi, agent, category_id, other)))
    assert (await _pacing(wapi, agent, category_id))["stale"] == 0
    again = await _decide(wapi, human, back)
    assert again.status_code == 200 and again.json()["state"] == "approved", again.text


async def test_an_undo_leaves_the_rule_it_saved_when_someone_changed_it_since(wapi: Api) -> None:  # noqa: F811
    _, agent, human, category_id = await _project(wapi)
    review_id = await _submit(wapi, agent, category_id)
    edited = await _edit_with_rule(wapi, human, await _open(wapi, human, review_id), RULE)
    rule = await _until("the rule was never saved", lambda: _active(wapi, agent, RULE["rule_text"]))
    revised = await wapi.http.post(
        "/v1/rules",
        json={
            "rule_text": "Always propose two concrete times.",
            "lineage_id": rule["lineage_id"],
            "expected_rev": 1,
        },
        headers=agent,
    )
    assert revised.status_code == 201, revised.text

    back = await _undo(wapi, human, edited)
    assert (
        "if it was changed since, it stays as changed" in (await _last_turn(wapi, human, review_id))["body"]
    )
    # A later decision of the same review with another rule: its save reaches rules after the withdrawal.
    later = {"rule_text": "Sign with your first name.", "scope": "general"}
    assert (await _edit_with_rule(wapi, human, back, later))["state"] == "approved"
    await _until("the later rule was never saved", lambda: _active(wapi, agent, later["rule_text"]))
    # The withdrawal came first and left the lineage as the agent revised it.
    assert await _history(wapi, human, rule["lineage_id"]) == [
        (1, "superseded", "created"),
        (2, "active", "revised"),
    ]
    assert await _active(wapi, agent, "Always propose two concrete times.") is not None


async def _pacing_held(api: Api, agent: dict[str, str], category_id: str, review_id: str) -> bool:
    return bool(
        _place(await _pacing(api, agent, category_id), review_id)["item"]["state"] != "in_window_fresh"
    )


async def _not(value: Awaitable[Any]) -> bool:
    return not await value


async def _is(value: Awaitable[Any], expected: Any) -> bool:
    return bool(await value == expected)


# --- in the use case -------------------------------------------------------------------------------


async def test_the_undo_writes_the_withdrawal_once_after_the_save(env: Env) -> None:
    """In the undo's own unit, behind the decision's save in the review's outbox; a replay of the undo
    (same key) writes nothing more, and an undone approve that saved no rule withdraws none."""
    env.settings = replace(env.settings, undo_window_s=60)
    review = await opened(env)
    rule = {"rule_text": "Always propose a concrete time.", "scope": "general"}
    decision = Decision("edit", review.revision, review.version, body="Thursday 2pm?", new_rule=rule)
    edited = await app.decide(env, HUMAN, review.id, decision)
    for _ in range(2):
        back = await app.undo_decision(env, HUMAN, review.id, edited.revision, edited.version, "undo-1")
    rule_id = peers(env).rules_checked[0].rule_id
    assert [next(iter(e)) for e in await outbox(env, "rules")] == ["rule_requested", "rule_withdrawn"]
    [withdrawn] = await outbox(env, "rules", "rule_withdrawn")
    assert withdrawn["rule_withdrawn"]["rule_id"] == rule_id
    assert (await app.get_feedback(env, AGENT, review.id)).new_rules == []  # the agent is taught no rule
    again = await app.decide(env, HUMAN, review.id, Decision("approve", back.revision, back.version))
    await app.undo_decision(env, HUMAN, review.id, again.revision, again.version)
    assert len(await outbox(env, "rules", "rule_withdrawn")) == 1


# --- in the rules context ----------------------------------------------------------------------------


def _withdrawn(t: Tenant, rule_id: str, event_id: str) -> common_pb2.Event:
    event = RuleWithdrawn(principal=t.human.to_proto(), review_id=new_id("rr"), rule_id=rule_id)
    return common_pb2.Event(event_id=event_id, type="rule_withdrawn", payload=codec.encode(event).encode())


async def test_a_withdrawal_that_arrives_with_its_save_ends_withdrawn_once(
    open_db: Callable[[ServiceSpec], Awaitable[Database]],
) -> None:
    env, t = rules_app.Env(await open_db(SPEC), SETTINGS), Tenant()
    rule_id = new_id("rule")
    save, withdraw = (
        _requested(t, rule_id, "Always propose a concrete time.", "evt_s"),
        _withdrawn(t, rule_id, "evt_w"),
    )
    # The undo came before the save reached rules: both arrive in one delivery, in outbox order.
    assert await ingest(env, [save, withdraw, withdraw]) == (2, 1)
    assert (await rules_app.get_rules(env, t.agent)).rules == []
    [first, undone] = await rules_app.rule_history(env, t.human, (await _lineage(env, t, rule_id)))
    assert (first.rule.id, undone.rule.action.value, undone.status) == (rule_id, "undone", "retired")
    assert undone.rule.changed_by_id == t.human.actor_id
    # The same withdrawal again under a new event id (a repeated undo) finds the lineage moved: no change.
    assert await ingest(env, [_withdrawn(t, rule_id, "evt_w2")]) == (1, 0)
    assert len(await rules_app.rule_history(env, t.human, undone.rule.lineage_id)) == 2
    # A rule that was never saved (its save refused) is only logged.
    assert await ingest(env, [_withdrawn(t, new_id("rule"), "evt_w3")]) == (1, 0)


async def _lineage(env: rules_app.Env, t: Tenant, rule_id: str) -> str:
    async with env.db.engine.connect() as conn:
        lineage = await store.rule_lineage_of(conn, rule_id)
    assert lineage is not None
    return lineage
