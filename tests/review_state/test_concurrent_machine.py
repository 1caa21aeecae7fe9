"""State machine (hypothesis): human, review-agent and composer verbs run concurrently against one
review, a batch at a time, each batch naming the (revision, version) it read. After every batch:

- no diff and no rule without its committed decision: the outbox's ``diff_committed`` events are
  exactly the diffs on committed edit turns, its ``rule_requested`` events exactly the rules the
  committed decision turns name;
- the human's last committed verb stands: no write is lost (the row is the last committed write),
  and once a human's decision sent the review, the message is the human's;
- exactly one terminal nudge (the failed-send pair aside), the highest ``seq`` of the review's own
  nudges; only the composer's ``front_run_next`` may follow it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from review_state import app
from review_state.app import Decision, Env, Revision
from review_state.domain.machine import State
from review_state.domain.review import Review
from reviewloop.errors import Code, DomainError

from tests.review_state.conftest import AGENT, DRAFT, HUMAN, REVIEWER, outbox, peers, provider

TERMINAL = {"sent", "send_failed", "cancelled"}
VERBS = {
    "composer": ["submit_revision", "post_review_chat", "restamp_review", "cancel_review"],
    "human": ["open_review", "approve", "edit", "reject", "escalate", "post_review_chat", "cancel_review"],
    "review_agent": ["approve", "edit", "reject", "escalate"],
}
move = st.sampled_from(list(VERBS)).flatmap(
    lambda actor: st.tuples(st.just(actor), st.sampled_from(VERBS[actor]), st.booleans())
)
batch = st.tuples(st.lists(move, min_size=1, max_size=3), st.sampled_from(["ok", "ok", "ok", "refuse"]))


async def _do(env: Env, actor: str, verb: str, with_rule: bool, seen: Review, n: int) -> tuple[str, Review]:
    """Run one verb as ``actor`` against the (revision, version) ``seen``; what it committed."""
    rev, ver = seen.revision, seen.version
    if actor == "composer":
        if verb == "submit_revision":
            return verb, await app.submit_revision(
                env, AGENT, app.SubmitRevisionRequest(seen.id, rev, Revision(body_text=f"redraft {n}"))
            )
        if verb == "restamp_review":
            return verb, await app.restamp(
                env, AGENT, app.RestampRequest(seen.id, rev, composition_token="tok")
            )
        if verb == "cancel_review":
            return verb, await app.cancel(env, AGENT, seen.id, rev, "")
        return verb, (await app.post_chat(env, AGENT, seen.id, f"question {n}"))[0]
    if actor == "human" and verb == "open_review":
        return verb, await app.open_review(env, HUMAN, seen.id, rev, ver)
    if actor == "human" and verb == "post_review_chat":
        return verb, (await app.post_chat(env, HUMAN, seen.id, f"comment {n}"))[0]
    if actor == "human" and verb == "cancel_review":
        return verb, await app.cancel(env, HUMAN, seen.id, rev, "")
    body = f"{actor} edit {n}" if verb == "edit" else None
    rule = {"rule_text": f"Rule number {n}."} if with_rule and actor == "human" else None
    decision = Decision(verb, rev, ver, body=body, new_rule=rule)
    if actor == "review_agent":
        return verb, (await app.reviewer_decide(env, REVIEWER, seen.id, decision)).review
    return verb, await app.decide(env, HUMAN, seen.id, decision)


async def _check(
    env: Env, review_id: str, committed: list[tuple[str, str, Review]], composer_chased: bool
) -> None:
    now, turns = await app.get_review(env, HUMAN, review_id)
    # No diff or rule without its committed decision (and none of a committed one lost).
    diffs = sorted(
        (e["diff"]["to_revision"], e["diff"]["diff_json"])
        for e in await outbox(env, "diff")
        if e["diff"]["review_id"] == review_id
    )
    edits = sorted(
        (t.revision, _canonical(t.diff_json)) for t in turns if t.turn_type == "decision" and t.diff_json
    )
    assert [(int(r), _canonical(orjson.loads(j))) for r, j in diffs] == edits
    requested = [e["rule_requested"] for e in await outbox(env, "rules") if "rule_requested" in e]
    rules = sorted(r["rule_id"] for r in requested if r["source_review_id"] == review_id)
    assert rules == sorted(r for t in turns for r in (t.rule_ids or []))
    # No lost write: the row is the last committed write.
    if committed:
        assert now.version == max(r.version for _, _, r in committed)
    # The human's last committed verb stands: a review a human's decision sent carries the human's text.
    human = [r for actor, _, r in committed if actor == "human"]
    if human and human[-1].state in (State.SENT, State.FAILED):
        assert now.state in (human[-1].state, State.CANCELLED) and now.body_text == human[-1].body_text
    # One terminal nudge, the highest seq of the review's own nudges; only front_run_next after it.
    reasons = [e["reason"] for e in await outbox(env) if e["review_id"] == review_id]
    own = [r for r in reasons if r != "front_run_next"]
    terminals = [r for r in own if r in TERMINAL]
    assert terminals in ([], ["sent"], ["cancelled"], ["send_failed"], ["send_failed", "cancelled"]), reasons
    if terminals:
        first = reasons.index(terminals[0])
        assert own[-len(terminals) :] == terminals, reasons
        assert all(r in TERMINAL | {"front_run_next"} for r in reasons[first:]), reasons
    assert "front_run_next" not in reasons[: reasons.index(terminals[0]) if terminals else len(reasons)]
    if not composer_chased:  # the composer's event: a human's or reviewer's 409 terminal queues none
        assert "front_run_next" not in reasons, reasons


def _canonical(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=st.lists(batch, min_size=1, max_size=6))
async def test_concurrent_human_reviewer_and_composer_verbs_on_one_review(
    env: Env, batches: list[tuple[list[tuple[str, str, bool]], str]]
) -> None:
    fake = peers(env)
    fake.round_limit = 10**6
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9),
    )
    committed: list[tuple[str, str, Review]] = []
    composer_chased = False  # the composer hit a 409 terminal
    n = 0
    for moves, mode in batches:
        provider(env).mode = mode
        seen, _ = await app.get_review(env, HUMAN, review.id)
        runs = []
        for actor, verb, with_rule in moves:
            n += 1
            runs.append(_do(env, actor, verb, with_rule, seen, n))
        results = await asyncio.gather(*runs, return_exceptions=True)
        provider(env).mode = "ok"
        done = []
        for (actor, _, _), result in zip(moves, results, strict=True):
            if isinstance(result, DomainError):
                composer_chased |= actor == "composer" and result.code is Code.TERMINAL
                continue
            assert not isinstance(result, BaseException), result
            done.append((actor, result[0], result[1]))
        committed.extend(sorted(done, key=lambda c: c[2].version))
        await _check(env, review.id, committed, composer_chased)
