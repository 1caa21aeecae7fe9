"""Events from rules: rule changes and graduations nudge the pending drafts in their scope."""

from __future__ import annotations

import orjson
from review_state import app
from review_state.app import Env
from reviewloop.common.v1 import common_pb2

from tests.review_state.conftest import AGENT, DRAFT, outbox


def _event(type_: str, payload: dict[str, object], event_id: str) -> common_pb2.Event:
    return common_pb2.Event(event_id=event_id, aggregate_id="x", type=type_, payload=orjson.dumps(payload))


async def _submit(env: Env, category_id: str) -> str:
    _, review = await app.submit(
        env, AGENT, kind="send", draft=DRAFT, category_id=category_id, idempotency_key=""
    )
    return review.id


async def test_a_general_rule_propagates_with_siblings_and_a_small_batch(env: Env) -> None:
    ids = [await _submit(env, "cat_a") for _ in range(5)] + [await _submit(env, "cat_b")]
    await app.cancel(env, AGENT, ids[0], 1, "")  # closed drafts are out of scope
    event = _event(
        "rule_changed",
        {
            "org_id": "org_1",
            "project_id": "",
            "scope": "general",
            "category_id": "",
            "agent_id": "",
            "rule": {"id": "rule_1", "lineage_id": "rln_1", "rev": 1, "rule_text": "Be concrete."},
            "rule_high_water": 3,
        },
        "evt_1",
    )
    assert await app.ingest(env, [event, event]) == (1, 1)  # a redelivery is counted once
    nudges = [e for e in await outbox(env) if e["reason"] == "propagate_general_rule"]
    assert sorted(n["review_id"] for n in nudges) == sorted(ids[1:])
    by_id = {n["review_id"]: n["payload"] for n in nudges}
    assert by_id[ids[1]]["siblings"] == {"category_id": "cat_a", "pending_count": 3}
    assert by_id[ids[5]]["siblings"] == {"category_id": "cat_b", "pending_count": 0}
    assert {p["suggested_batch"] for p in by_id.values()} == {3}
    assert by_id[ids[1]]["rule"] == {"id": "rule_1", "rule_text": "Be concrete."}


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
    assert events == [("rule_changed", mine), ("recheck_category", mine)]
    assert other not in {rid for _, rid in events}


async def test_another_orgs_rule_touches_nothing(env: Env) -> None:
    await _submit(env, "cat_a")
    rule = {"org_id": "org_2", "project_id": "", "scope": "general", "rule": {}, "rule_high_water": 1}
    await app.ingest(env, [_event("rule_changed", rule, "evt_4")])
    assert await outbox(env) == []
