"""A category merged into another (``categories_merged`` from rules): its pending drafts move to the one
that stays, each with a ``recheck_category`` nudge; closed drafts and other categories stay as they were."""

from __future__ import annotations

import orjson
from review_state import app
from review_state.app import Env
from review_state.store import pacing as paced
from reviewloop.common.v1 import common_pb2

from tests.review_state.conftest import AGENT, DRAFT, outbox
from tests.review_state.test_ingest import _event, _general_rule

HIGH_WATER = 9


async def _submit(env: Env, category_id: str) -> str:
    _, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id=category_id, idempotency_key="")
    )
    return review.id


async def test_a_merge_moves_the_pending_drafts_and_asks_their_agent_to_recheck(env: Env) -> None:
    pending = [await _submit(env, "cat_a") for _ in range(2)]
    closed, elsewhere = await _submit(env, "cat_a"), await _submit(env, "cat_b")
    await app.cancel(env, AGENT, closed, 1, "")
    merge = {
        "org_id": "org_1",
        "project_id": "prj_1",
        "category_id": "cat_a",
        "into_category_id": "cat_c",
        "state": "supervised",
    }
    event = common_pb2.Event(
        event_id="evt_m", aggregate_id="org_1", type="categories_merged", payload=orjson.dumps(merge)
    )
    assert await app.ingest(env, [event, event]) == (1, 1)  # a redelivery moves nothing twice
    categories = {rid: (await app.get_review(env, AGENT, rid))[0] for rid in [*pending, closed, elsewhere]}
    assert {rid: r.category_id for rid, r in categories.items()} == {
        **dict.fromkeys(pending, "cat_c"),
        closed: "cat_a",
        elsewhere: "cat_b",
    }
    assert {categories[rid].version for rid in pending} == {2}  # a mutation of the row, like any other
    nudges = [e for e in await outbox(env) if e["reason"] == "recheck_category"]
    assert sorted(n["review_id"] for n in nudges) == sorted(pending)
    assert {n["category_id"] for n in nudges} == {"cat_c"}
    assert all(
        n["payload"]
        == {
            "category_id": "cat_c",
            "state": "supervised",
            "reason": "merged",
            "merged_from": "cat_a",
        }
        for n in nudges
    )


async def test_a_merged_stale_draft_is_paced_by_the_category_that_stays(env: Env) -> None:
    """A draft a rule left stale keeps its hold and its place in the pacing after the merge, now under the
    category it moved to."""
    drafts = [await _submit(env, "cat_a") for _ in range(2)]
    await app.ingest(env, [_event("rule_changed", _general_rule(HIGH_WATER), "evt_rule")])
    merge = {
        "org_id": "org_1",
        "project_id": "prj_1",
        "category_id": "cat_a",
        "into_category_id": "cat_c",
        "state": "supervised",
    }
    await app.ingest(env, [_event("categories_merged", merge, "evt_merge")])
    async with env.db.engine.connect() as conn:
        assert await paced.counts(conn, "prj_1", "cat_a") == (0, 0)
        stale, _ = await paced.counts(conn, "prj_1", "cat_c")
    assert stale == len(drafts)
