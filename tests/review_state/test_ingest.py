"""Events from rules: rule changes mark the pending drafts in their scope stale and nudge them a look-ahead
window at a time (the pacing); graduations nudge the pending drafts of their category."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from review_state import app
from review_state.app import Env, pacing
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.storage.inbox import ingest_each

from tests.review_state.conftest import AGENT, DRAFT, HUMAN, outbox, peers


def _event(type_: str, payload: dict[str, object], event_id: str) -> common_pb2.Event:
    return common_pb2.Event(event_id=event_id, aggregate_id="x", type=type_, payload=orjson.dumps(payload))


async def _submit(env: Env, category_id: str) -> str:
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id=category_id, idempotency_key="")
    )
    return review.id


def _general_rule(high_water: int, **extra: object) -> dict[str, object]:
    return {
        "org_id": "org_1",
        "project_id": "",
        "scope": "general",
        "category_id": "",
        "agent_id": "",
        "rule": {"id": "rule_1", "lineage_id": "rln_1", "rev": 1, "rule_text": "Be concrete."},
        "rule_high_water": high_water,
        **extra,
    }


def _propagated(events: list[dict[str, Any]]) -> list[str]:
    return [e["review_id"] for e in events if e["reason"] == "propagate_general_rule"]


async def test_a_general_rule_nudges_a_look_ahead_window_per_category_with_siblings(env: Env) -> None:
    ids = [await _submit(env, "cat_a") for _ in range(5)] + [await _submit(env, "cat_b")]
    await app.cancel(env, AGENT, ids[0], 1, "")  # closed drafts are out of scope
    event = _event("rule_changed", _general_rule(3), "evt_1")
    assert await app.ingest(env, [event, event]) == (1, 1)  # a redelivery is counted once
    nudges = [e for e in await outbox(env) if e["reason"] == "propagate_general_rule"]
    # Never the whole queue: the look-ahead window (3) of cat_a's four stale drafts, and cat_b's one.
    assert sorted(n["review_id"] for n in nudges) == sorted([*ids[1:4], ids[5]])
    by_id = {n["review_id"]: n["payload"] for n in nudges}
    assert by_id[ids[1]]["siblings"] == {"category_id": "cat_a", "pending_count": 3}
    assert by_id[ids[5]]["siblings"] == {"category_id": "cat_b", "pending_count": 0}
    assert {p["suggested_batch"] for p in by_id.values()} == {3}
    assert by_id[ids[1]]["rule"] == {"id": "rule_1", "rule_text": "Be concrete."}

    # A restamp against the new rules opens the slot, in its own unit of work: the last draft is nudged.
    await app.restamp(env, AGENT, app.RestampRequest(ids[2], 1, composition_token="tok"))
    assert _propagated(await outbox(env))[len(nudges) :] == [ids[4]]
    state = await app.pacing_state(env, AGENT, "cat_a")
    assert [(r.id, s is None) for r, s in state.drafts] == [
        (ids[1], False), (ids[2], True), (ids[3], False), (ids[4], False)
    ]  # fmt: skip
    assert state.window is not None and state.window.cursor_review_id == ids[2]
    assert state.rule_high_water == 3 and state.next_review_ids == []


async def test_a_stale_draft_is_held_from_release_until_restamped(env: Env) -> None:
    held, restamped = await _submit(env, "cat_a"), await _submit(env, "cat_a")
    await app.ingest(env, [_event("rule_changed", _general_rule(7), "evt_h")])
    opened = await app.open_review(env, HUMAN, held, 1, 1)
    with pytest.raises(DomainError) as refused:
        await app.decide(env, HUMAN, held, app.Decision("approve", opened.revision, opened.version))
    assert refused.value.code is Code.BORN_STALE
    review, _ = await app.get_review(env, AGENT, held)
    assert (review.state.value, review.version) == ("in_review", opened.version)  # no mutation
    renudged = [e for e in await outbox(env) if e["reason"] == "rule_changed"]
    assert [(e["review_id"], e["payload"].get("born_stale")) for e in renudged] == [(held, True)]

    env.peers.token_high_water = 7  # type: ignore[attr-defined]
    await app.restamp(env, AGENT, app.RestampRequest(restamped, 1, composition_token="tok"))
    opened = await app.open_review(env, HUMAN, restamped, 1, 2)
    approved = await app.decide(env, HUMAN, restamped, app.Decision("approve", 1, opened.version))
    assert approved.state.value in ("approved", "sent")


async def test_a_rule_saved_without_propagation_holds_but_nudges_nobody(env: Env) -> None:
    review_id = await _submit(env, "cat_a")
    event = _event("rule_changed", _general_rule(7, propagate_to_pending=False), "evt_p")
    await app.ingest(env, [event])
    assert _propagated(await outbox(env)) == []
    state = await app.pacing_state(env, AGENT, "cat_a")
    assert [(r.id, s is not None) for r, s in state.drafts] == [(review_id, True)]


async def test_the_minimum_interval_defers_a_refill_to_the_sweep(env: Env) -> None:
    ids = [await _submit(env, "cat_a") for _ in range(4)]
    env.peers.pacing = {"lookahead_window": 1, "rework_batch_max": 2, "nudge_min_interval_ms": 3_600_000}  # type: ignore[attr-defined]
    await app.ingest(env, [_event("rule_changed", _general_rule(3, suggested_batch=5), "evt_i")])
    first = [e for e in await outbox(env) if e["reason"] == "propagate_general_rule"]
    assert [e["review_id"] for e in first] == [ids[0]]
    assert first[0]["payload"]["suggested_batch"] == 2  # bounded by rework_batch_max
    await app.restamp(env, AGENT, app.RestampRequest(ids[0], 1, composition_token="tok"))
    assert await pacing.sweep(env) == 0  # the interval has not passed: nothing more yet
    assert _propagated(await outbox(env)) == [ids[0]]
    env.peers.pacing = {**env.peers.pacing, "nudge_min_interval_ms": 0}  # type: ignore[attr-defined]
    assert await pacing.sweep(env) == 1
    assert _propagated(await outbox(env)) == [ids[0], ids[1]]
    assert await pacing.sweep(env) == 0  # the window is full: one sweep, one refill


async def test_a_category_rule_and_a_graduation_nudge_only_that_category(env: Env) -> None:
    mine, other = await _submit(env, "cat_a"), await _submit(env, "cat_b")
    rule = {
        "org_id": "org_1",
        "project_id": "prj_1",
        "scope": "category",
        "category_id": "cat_a",
        "agent_id": "",
        "rule": {"id": "rule_2"},
        "rule_high_water": 4,
    }
    graduated = {
        "org_id": "org_1",
        "project_id": "prj_1",
        "category_id": "cat_a",
        "state": "auto_notify",
        "reason": "graduated",
    }
    await app.ingest(
        env, [_event("rule_changed", rule, "evt_2"), _event("category_changed", graduated, "evt_3")]
    )
    events = [(e["reason"], e["review_id"]) for e in await outbox(env)]
    # The rule's nudge comes from the pacing refill once the events are in.
    assert events == [("recheck_category", mine), ("rule_changed", mine)]
    assert other not in {rid for _, rid in events}


async def test_another_orgs_rule_touches_nothing(env: Env) -> None:
    await _submit(env, "cat_a")
    rule = {"org_id": "org_2", "project_id": "", "scope": "general", "rule": {}, "rule_high_water": 1}
    await app.ingest(env, [_event("rule_changed", rule, "evt_4")])
    assert await outbox(env) == []


async def test_a_crash_before_the_refill_loses_no_slot_the_sweep_opens_the_window(env: Env) -> None:
    ids = [await _submit(env, "cat_a") for _ in range(4)]
    # The event's unit of work commits, then the process dies before the refill that follows it.
    await ingest_each(env.db, [_event("rule_changed", _general_rule(3), "evt_c")], app.SUBSCRIPTIONS)
    assert _propagated(await outbox(env)) == []
    assert await pacing.sweep(env) == 3  # any replica's sweep, once
    assert await pacing.sweep(env) == 0
    assert _propagated(await outbox(env)) == ids[:3]


async def _high_water(env: Env, category_id: str = "cat_a") -> int:
    review, _ = await app.get_review(env, AGENT, await _submit(env, category_id))
    return review.rule_high_water


async def test_a_new_draft_records_the_stack_a_rules_event_moved_never_an_older_one(env: Env) -> None:
    """The submit remembers the stack's high-water (no GetRules per submit); a rules event forgets it."""
    fake = peers(env)
    fake.stack_high_water_now = 3
    assert await _high_water(env) == 3
    fake.stack_high_water_now = 7  # saved in rules; its rule_changed not relayed yet
    assert await _high_water(env) == 3  # remembered: an older high-water, which the event then marks stale
    await app.ingest(env, [_event("rule_changed", _general_rule(7), "evt_m")])
    assert await _high_water(env) == 7
    state = await app.pacing_state(env, AGENT, "cat_a")
    assert sorted((r.rule_high_water, s is None) for r, s in state.drafts) == [
        (3, False), (3, False), (7, True)
    ]  # fmt: skip


async def test_a_rules_event_during_a_submits_stack_read_is_not_remembered(env: Env) -> None:
    """A GetRules answer that raced a rules event is used by that submit only if no event came before
    its insert; it is never stored, so the next submit asks again."""
    fake = peers(env)
    fake.stack_high_water_now = 3

    async def rule_saved_and_relayed() -> None:
        fake.on_stack_read = None
        fake.stack_high_water_now = 7
        await app.ingest(env, [_event("rule_changed", _general_rule(7), "evt_r")])

    fake.on_stack_read = rule_saved_and_relayed
    assert await _high_water(env) == 7  # the event came before the insert: asked again
    fake.stack_high_water_now = 9  # not relayed yet: the 7 was stored after the event, so it stays
    assert await _high_water(env) == 7
