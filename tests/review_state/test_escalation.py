"""Escalation goes somewhere (issue 38): it names a person or role of the project and an optional
deadline, the queue filters on it ("escalated to me", overdue), and the target is told through the
outbox (the ``escalated`` webhook event, and a mail when it has an address), never directly."""

from __future__ import annotations

from datetime import timedelta
from email import message_from_bytes
from email.policy import default

import pytest
from review_state import app
from review_state.app import Decision, Env, ReviewFilter, Revision
from review_state.app.notify import send_mail
from review_state.domain.escalation import Escalation, mine
from reviewloop.errors import Code, DomainError
from reviewloop.review.v1.events_pb2 import EscalationMail
from reviewloop.storage import utcnow

from tests.review_state.conftest import AGENT, HUMAN, opened, outbox, provider

BOB = Escalation(
    kind="person",
    target_id="key_bob",
    name="bob",
    notify=("bob@example.com",),
    review_url="http://console.test/console/reviews/x",
    by_name="alice",
)


async def _escalated(env: Env, escalation: Escalation, feedback: str = "legal should see this"):  # type: ignore[no-untyped-def]
    review = await opened(env)
    return await app.decide(
        env,
        HUMAN,
        review.id,
        Decision("escalate", review.revision, review.version, feedback=feedback, escalation=escalation),
    )


async def _listed(env: Env, filters: ReviewFilter) -> list[str]:
    reviews, _ = await app.list_reviews(env, HUMAN, filters, cursor="", limit=0)
    return [r.id for r in reviews]


async def test_an_escalation_names_its_person_and_deadline_and_tells_them_through_the_outbox(
    env: Env,
) -> None:
    deadline = (utcnow() + timedelta(hours=2)).replace(microsecond=0)
    escalated = await _escalated(env, BOB.__class__(**{**BOB.__dict__, "deadline": deadline}))
    assert (escalated.state.value, escalated.escalated_to, escalated.escalated_to_name) == (
        "needs_review",
        "key_bob",
        "bob",
    )
    assert (escalated.escalated_by, escalated.escalation_deadline) == (HUMAN.actor_id, deadline)
    [event] = await outbox(env, "nudge", "escalated")
    assert {
        k: event[k] for k in ("review_id", "target_kind", "target_id", "target_name", "escalated_by")
    } == {
        "review_id": escalated.id,
        "target_kind": "person",
        "target_id": "key_bob",
        "target_name": "bob",
        "escalated_by": HUMAN.actor_id,
    }
    assert event["deadline"] == deadline.isoformat().replace("+00:00", "Z")
    assert event["feedback"] == "legal should see this"
    [mail] = await outbox(env, "mail")
    assert mail["to"] == ["bob@example.com"]
    assert "by alice" in mail["body_text"] and "Open it: http://console.test" in mail["body_text"]
    assert "Decide by:" in mail["body_text"]


async def test_escalated_to_me_is_the_persons_key_or_its_role_and_overdue_is_past_the_deadline(
    env: Env,
) -> None:
    to_bob = await _escalated(env, BOB)
    to_admins = await _escalated(env, Escalation(kind="role", target_id="admin"))
    soon = utcnow() + timedelta(minutes=5)
    late = await _escalated(env, Escalation(kind="role", target_id="human", deadline=soon))
    anyone = await _escalated(env, Escalation())
    assert to_admins.escalated_to_name == "admins" and anyone.escalated_to is None
    assert set(await _listed(env, ReviewFilter(escalated=True))) == {
        to_bob.id,
        to_admins.id,
        late.id,
        anyone.id,
    }
    assert await _listed(env, ReviewFilter(escalated_to=mine("key_bob", "human"))) == [late.id, to_bob.id]
    assert await _listed(env, ReviewFilter(escalated_to=mine("key_carol", "admin"))) == [to_admins.id]
    assert await _listed(env, ReviewFilter(escalated_to=mine("key_dan", "human"))) == [late.id]
    assert await _listed(env, ReviewFilter(overdue=True)) == []
    assert await _listed(env, ReviewFilter(overdue=True, now=soon + timedelta(seconds=1))) == [late.id]
    assert await outbox(env, "mail") != [] and len(await outbox(env, "nudge", "escalated")) == 4


async def test_a_redraft_keeps_the_escalation_and_a_decision_that_settles_the_draft_ends_it(env: Env) -> None:
    escalated = await _escalated(env, BOB)
    redrafted = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(escalated.id, escalated.revision, Revision(body_text="v2"))
    )
    assert redrafted.escalated_to == "key_bob"
    bob = HUMAN.__class__(HUMAN.org_id, HUMAN.project_id, HUMAN.actor_kind, "key_bob")
    picked = await app.open_review(env, bob, redrafted.id, redrafted.revision, redrafted.version)
    rejected = await app.decide(
        env, bob, picked.id, Decision("reject", picked.revision, picked.version, feedback="no")
    )
    assert (rejected.escalated_to, rejected.escalated_at) == (None, None)
    assert await _listed(env, ReviewFilter(escalated=True)) == []


@pytest.mark.parametrize(
    ("escalation", "action", "field"),
    [
        (
            Escalation(kind="person", target_id="key_b", deadline=utcnow() - timedelta(seconds=1)),
            "escalate",
            "/escalation_deadline",
        ),
        (Escalation(kind="role", target_id="owner"), "escalate", "/escalate_to/id"),
        (Escalation(kind="person", target_id="agt_x"), "escalate", "/escalate_to/id"),
        (Escalation(kind="team", target_id="x"), "escalate", "/escalate_to/kind"),
        (BOB, "reject", "/escalate_to"),
    ],
)
async def test_a_bad_target_or_deadline_is_refused_and_writes_nothing(
    env: Env, escalation: Escalation, action: str, field: str
) -> None:
    review = await opened(env)
    with pytest.raises(DomainError) as refused:
        await app.decide(
            env,
            HUMAN,
            review.id,
            Decision(action, review.revision, review.version, feedback="x", escalation=escalation),
        )
    assert refused.value.code is Code.BAD_REQUEST and field in str(refused.value)
    assert (await app.get_review(env, HUMAN, review.id))[0].version == review.version
    assert await outbox(env, "nudge", "escalated") == [] and await outbox(env, "mail") == []


async def test_the_escalation_mail_goes_through_the_configured_provider(env: Env) -> None:
    mail = EscalationMail(
        review_id="rr_1",
        to=["bob@example.com"],
        subject="Escalated to you: x",
        body_text="hi\n",
        rfc_message_id="<escalation.turn_1@reviewloop>",
    )
    await send_mail(env, mail)
    [written] = list(provider(env).directory.glob("*.eml"))
    parsed = message_from_bytes(written.read_bytes(), policy=default)
    assert (parsed["To"], parsed["Subject"], parsed["Auto-Submitted"]) == (
        "bob@example.com",
        "Escalated to you: x",
        "auto-generated",
    )
