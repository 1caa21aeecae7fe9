"""review_state use cases on SQLite and PostgreSQL: the lifecycle from submit to a delivered message."""

from __future__ import annotations

import asyncio
from pathlib import Path

from review_state import app
from review_state.app import Decision, Env, Revision
from review_state.domain.submission import Draft
from reviewloop.errors import Code, DomainError

from tests.review_state.conftest import (
    ADMIN,
    AGENT,
    DRAFT,
    HUMAN,
    OTHER_AGENT,
    opened,
    outbox,
    peers,
    queued,
    reasons,
)


async def test_concurrent_cancels_commit_once_and_emit_one_terminal_nudge(env: Env) -> None:
    review = await queued(env)

    async def cancel(principal: object) -> str:
        try:
            return (await app.cancel(env, principal, review.id, 1, "")).state.value  # type: ignore[arg-type]
        except DomainError as error:
            return error.code.value

    outcomes = await asyncio.gather(*(cancel(p) for p in (AGENT, HUMAN, AGENT, HUMAN)))
    assert outcomes.count("cancelled") == 1
    assert set(outcomes) - {"cancelled"} <= {Code.TERMINAL.value, Code.STALE.value}
    got = await reasons(env, review.id)
    assert got.count("cancelled") == 1
    assert set(got) <= {"cancelled", "front_run_next"}


async def test_a_refused_submit_writes_nothing(env: Env) -> None:
    for draft in (Draft(**{**DRAFT.__dict__, "intent": None}), Draft(**{**DRAFT.__dict__, "to": []})):
        try:
            await app.submit(
                env, AGENT, app.SubmitRequest(kind="send", draft=draft, category_id="", idempotency_key="k")
            )
        except DomainError:
            pass
        else:
            raise AssertionError("accepted a bad draft")
    reviews, _ = await app.list_reviews(env, AGENT, cursor="", limit=10)
    assert reviews == [] and await outbox(env) == []


async def test_only_the_composing_agent_cancels_as_composer(env: Env) -> None:
    review = await queued(env)
    try:
        await app.cancel(env, OTHER_AGENT, review.id, 1, "")
    except DomainError as error:
        assert error.code is Code.FORBIDDEN_SCOPE
    assert (await app.get_review(env, AGENT, review.id))[0].state.value == "needs_review"


async def test_human_approval_delivers_the_reviewed_bytes_and_emits_sent_last(
    env: Env, tmp_path: Path
) -> None:
    review = await opened(env)
    sent = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert sent.state.value == "sent" and sent.send_path == "human_reviewed"
    assert sent.message_id and sent.message_id.startswith("msg_") and sent.sent_at is not None
    files = list((tmp_path / "outbox").glob("*.eml"))
    assert len(files) == 1
    raw = files[0].read_bytes()
    assert b"Subject: Q3 pilot" in raw and b"Let me know your thoughts." in raw
    assert sent.rfc_message_id and sent.rfc_message_id.encode() in raw
    events = [e for e in await outbox(env) if e["review_id"] == review.id]
    assert events[-1]["reason"] == "sent"
    assert events[-1]["payload"]["decision"] == "approved"
    assert "thread_ref" not in events[-1]["payload"]  # a bare send threads nothing
    feedback = await app.get_feedback(env, AGENT, review.id)
    assert feedback.decision == "approved"


async def test_an_edit_stores_its_diff_and_reads_as_edited_in_sent_and_feedback(env: Env) -> None:
    review = await opened(env)
    decision = Decision(
        "edit",
        review.revision,
        review.version,
        body="Can you do Thursday 2pm?",
        feedback="tightened the CTA",
        new_rule={"rule_text": "Always propose a concrete time.", "scope": "general"},
    )
    sent = await app.decide(env, HUMAN, review.id, decision)
    assert sent.state.value == "sent" and sent.body_text == "Can you do Thursday 2pm?"
    assert sent.revision == review.revision + 1
    nudge = next(e for e in await outbox(env) if e["reason"] == "sent")
    feedback = await app.get_feedback(env, AGENT, review.id)
    assert feedback.decision == nudge["payload"]["decision"] == "edited"
    assert feedback.diff_json == {
        "fields_changed": ["body_text"],
        "hunks": [
            {
                "field": "body_text",
                "op": "replace",
                "before": "Let me know your thoughts.",
                "after": "Can you do Thursday 2pm?",
            }
        ],
    }
    assert [c.body for c in feedback.comments] == ["tightened the CTA"]
    requested = peers(env).rules_checked[0]
    assert feedback.new_rules == [requested.rule_id] and requested.source_review_id == review.id
    # no category: no outcome to count; the rule itself travels in the decision's outbox
    assert [e["rule_requested"]["rule_id"] for e in await outbox(env, "rules")] == [requested.rule_id]


async def test_outcomes_go_to_rules_per_category(env: Env) -> None:
    outcomes = []
    for action, body in (("approve", None), ("edit", "Changed."), ("edit", None), ("reject", None)):
        _, review = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="")
        )
        review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
        subject = "Q3 pilot" if action == "edit" and body is None else None
        await app.decide(
            env,
            HUMAN,
            review.id,
            Decision(action, review.revision, review.version, subject=subject, body=body),
        )
        outcomes.append((await outbox(env, "rules"))[-1]["outcome"])
    # An edit that changed nothing released the draft as-is: a clean approval, not drift.
    assert outcomes == ["clean_approval", "drift", "clean_approval", "rejection"]


async def test_reject_then_redraft_then_approve(env: Env) -> None:
    review = await opened(env)
    rejected = await app.decide(
        env, HUMAN, review.id, Decision("reject", review.revision, review.version, feedback="too soft")
    )
    assert rejected.state.value == "rejected" and rejected.revision == 2
    redrafted = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 2, Revision(body_text="Thursday 2pm?"))
    )
    assert (redrafted.state.value, redrafted.revision) == ("needs_review", 3)
    got = await reasons(env, review.id)
    assert got == ["rejected"]
    rejected_nudge = (await outbox(env))[0]["payload"]
    assert rejected_nudge["feedback"] == "too soft" and rejected_nudge["revision"] == 2


async def test_chat_flips_in_review_to_chatting_and_only_human_comments_nudge(env: Env) -> None:
    review = await queued(env)
    asked, _ = await app.post_chat(env, AGENT, review.id, "Lead with ROI or the case study?")
    assert asked.state.value == "needs_review"  # an agent may not conjure a reviewer
    review = await app.open_review(env, HUMAN, review.id, asked.revision, asked.version)
    chatted, turn = await app.post_chat(env, AGENT, review.id, "Still there?", idempotency_key="c1")
    assert chatted.state.value == "chatting" and turn.turn_type == "agent_question"
    again, twin = await app.post_chat(env, AGENT, review.id, "Still there?", idempotency_key="c1")
    assert twin.id == turn.id and again.version == chatted.version  # a retry never doubles the turn
    try:
        await app.post_chat(env, AGENT, review.id, "Something else", idempotency_key="c1")
    except DomainError as error:
        assert error.code is Code.IDEMPOTENCY_CONFLICT
    else:
        raise AssertionError("a reused key with another body was accepted")
    _, comment = await app.post_chat(env, HUMAN, review.id, "be more pushy, we need MRR")
    assert await reasons(env, review.id) == ["feedback_added"]
    feedback = await app.get_feedback(env, AGENT, review.id)
    assert [(c.id, c.actor_kind, c.body) for c in feedback.comments] == [
        (comment.id, "human", "be more pushy, we need MRR")
    ]
    _, turns = await app.get_review(env, AGENT, review.id)
    assert [t.turn_type for t in turns] == ["agent_question", "opened", "agent_question", "human_comment"]


async def test_attachments_omitted_keep_and_empty_clear(env: Env) -> None:
    from review_state.domain.submission import Attachment

    draft = Draft(**{**DRAFT.__dict__, "attachments": (Attachment("roi.pdf", "application/pdf", b"%PDF"),)})
    review = await queued(env, draft)
    kept = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(subject="New"))
    )
    assert [a.filename for a in kept.attachments] == ["roi.pdf"]
    cleared = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 2, Revision(attachments=()))
    )
    assert cleared.attachments == ()


async def test_restamp_records_the_new_high_water_without_a_new_revision(env: Env) -> None:
    review = await queued(env)
    peers(env).token_high_water = 9
    restamped = await app.restamp(env, AGENT, app.RestampRequest(review.id, 1, composition_token="tok"))
    assert (restamped.revision, restamped.version, restamped.rule_high_water) == (1, 2, 9)


async def test_console_verbs_take_an_admin(env: Env) -> None:
    for call in (
        app.set_policy(env, HUMAN, "allow_direct"),
        app.add_block(env, AGENT, "x@y.com"),
        app.add_suppression(env, AGENT, "x@y.com"),
        app.record_inbound(
            env, AGENT, from_address="a@b.com", to=["c@d.com"], cc=[], subject="s", body_text="b", headers={}
        ),
    ):
        try:
            await call
        except DomainError as error:
            assert error.code is Code.FORBIDDEN_SCOPE
        else:
            raise AssertionError("a non-admin used a console verb")
    assert await app.get_policy(env, AGENT) == ("require_review", "floor", "", "")
    assert await app.set_policy(env, ADMIN, "allow_direct") == ("allow_direct", "override")
    assert await app.get_policy(env, AGENT) == ("allow_direct", "override", "allow_direct", "")
