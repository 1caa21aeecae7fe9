"""Every row of the review-policy table, the auto-send gates, and the submit-time contact checks."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest
from review_state import app, store
from review_state.app import Env
from review_state.bootstrap import settings_from_env
from review_state.domain.review import Review
from review_state.domain.submission import Dial, Draft, Intent, Policy, Route, route_for
from review_state.store.tables import contacts
from reviewloop.errors import Code, DomainError
from reviewloop.storage import utcnow
from sqlalchemy import select

from tests.review_state.conftest import ADMIN, AGENT, DRAFT, HUMAN, outbox, peers, queued
from tests.statements import statements

NO_INTENT = Draft(**{**DRAFT.__dict__, "intent": None})


async def _submit(env: Env, draft: Draft = DRAFT, **kwargs: object) -> tuple[str, Review]:
    return await app.submit(
        env,
        AGENT,
        app.SubmitRequest(
            kind="send",
            draft=draft,
            category_id=str(kwargs.pop("category_id", "")),
            idempotency_key="",
            **kwargs,
        ),
    )  # type: ignore[arg-type]


async def _count(env: Env) -> int:
    reviews, _ = await app.list_reviews(env, AGENT, cursor="", limit=100)
    return len(reviews)


@pytest.mark.parametrize(
    ("policy", "with_intent", "expected"),
    [
        ("require_review", True, ("queued_for_review", "needs_review", None)),
        ("require_review", False, Code.INTENT_REQUIRED),
        ("allow_direct", True, ("queued_for_review", "needs_review", None)),
        ("allow_direct", False, ("sent", "auto_sent", "agent_direct")),
        ("auto_send_graduated", True, ("queued_for_review", "needs_review", None)),  # supervised: held
        ("auto_send_graduated", False, Code.INTENT_REQUIRED),
    ],
)
async def test_every_row_of_the_policy_table(
    env: Env, policy: str, with_intent: bool, expected: object
) -> None:
    await app.set_policy(env, ADMIN, policy)
    draft = DRAFT if with_intent else NO_INTENT
    try:
        status, review = await _submit(env, draft, category_id="cat_1")
    except DomainError as error:
        assert error.code is expected
        assert "Nothing was sent and nothing was queued" in error.detail
        assert ("policy", f"{policy} (source: override)") in error.hints
        assert await _count(env) == 0 and await outbox(env) == []
        return
    assert (status, review.state.value, review.send_path) == expected
    assert review.id.startswith("rr_")  # every send returns a review_id, the direct 202 included
    if review.state.value == "auto_sent":
        events = await outbox(env)
        assert [e["reason"] for e in events] == ["sent"]
        assert (
            events[0]["payload"]["state"] == "auto_sent"
            and events[0]["payload"]["send_path"] == "agent_direct"
        )
    if policy == "auto_send_graduated":
        assert review.gate_outcome == "held:not_graduated"


@pytest.mark.parametrize("summary", ["short", "x" * 201, "        "])
async def test_intent_summary_must_be_one_real_sentence(env: Env, summary: str) -> None:
    with pytest.raises(DomainError) as caught:
        await _submit(env, Draft(**{**DRAFT.__dict__, "intent": Intent(summary)}))
    assert caught.value.code is Code.INTENT_REQUIRED and caught.value.violations[0].field == "/intent/summary"


@pytest.mark.parametrize(
    ("category_state", "never", "dial", "confidence", "expected"),
    [
        ("auto_notify", False, Dial(0.7, False, 0.0, 200), 0.9, "graduated_auto"),
        ("auto_silent", False, Dial(0.7, False, 0.0, 200), 0.9, "graduated_auto"),
        ("supervised", False, Dial(0.7, False, 0.0, 200), 0.9, "held:not_graduated"),
        ("auto_notify", True, Dial(0.7, False, 0.0, 200), 0.9, "held:never_graduate"),
        ("auto_notify", False, Dial(0.7, False, 0.0, 200), 0.5, "held:low_confidence"),
        ("auto_notify", False, Dial(0.7, False, 0.0, 200), None, "held:low_confidence"),
        ("auto_notify", False, Dial(0.7, True, 0.0, 200), 0.9, "held:first_contact"),
        ("auto_notify", False, Dial(0.7, False, 1.0, 200), 0.9, "held:canary"),
    ],
)
async def test_auto_send_gates(
    env: Env, category_state: str, never: bool, dial: Dial, confidence: float | None, expected: str
) -> None:
    await app.set_policy(env, ADMIN, "auto_send_graduated")
    fake = peers(env)
    fake.category_state, fake.never_graduate, fake.dial = category_state, never, dial
    status, review = await _submit(env, category_id="cat_1", confidence=confidence)
    if expected == "graduated_auto":
        assert (status, review.state.value, review.send_path, review.gate_outcome) == (
            "sent",
            "auto_sent",
            "graduated_auto",
            "",
        )
        payload = (await outbox(env))[-1]["payload"]
        assert payload["state"] == "auto_sent" and payload["gate_outcome"] == ""
    else:
        assert (status, review.state.value, review.gate_outcome) == (
            "queued_for_review",
            "needs_review",
            expected,
        )


@pytest.mark.parametrize(("category_state", "notified"), [("auto_notify", True), ("auto_silent", False)])
async def test_an_auto_send_in_an_auto_notify_category_notifies_the_humans(
    env: Env, category_state: str, notified: bool
) -> None:
    await app.set_policy(env, ADMIN, "auto_send_graduated")
    fake = peers(env)
    fake.category_state = category_state
    _, sent = await _submit(env, category_id="cat_1", confidence=0.9)
    fake.category_state = "supervised"
    _, held = await _submit(env, category_id="cat_1", confidence=0.9)
    assert (sent.state.value, held.state.value) == ("auto_sent", "needs_review")
    queue, _ = await app.list_reviews(env, HUMAN, app.ReviewFilter(humans_notified=True), cursor="", limit=0)
    assert [r.id for r in queue] == ([sent.id] if notified else [])
    _, turns = await app.get_review(env, HUMAN, sent.id)
    assert [t.turn_type for t in turns if t.actor_kind == "system"] == (
        ["humans_notified"] if notified else []
    )
    # In the same unit: the event the project's webhooks can ask for, named by the turn.
    told = await outbox(env, "nudge", "humans_notified")
    assert [(e["review_id"], e["turn_id"], e["to"]) for e in told] == (
        [(sent.id, next(t.id for t in turns if t.turn_type == "humans_notified"), sent.to)]
        if notified
        else []
    )


async def test_the_daily_cap_holds_the_send_and_never_drops_it(env: Env) -> None:
    await app.set_policy(env, ADMIN, "auto_send_graduated")
    fake = peers(env)
    fake.category_state, fake.dial = "auto_notify", Dial(0.7, False, 0.0, 1)
    first = await _submit(env, category_id="cat_1", confidence=0.9)
    second = await _submit(env, category_id="cat_1", confidence=0.9)
    assert first[1].state.value == "auto_sent"
    assert (second[1].state.value, second[1].gate_outcome) == ("needs_review", "held:daily_cap")
    assert (await _submit(env, category_id="cat_2", confidence=0.9))[
        1
    ].state.value == "auto_sent"  # per category


async def test_the_daily_cap_is_spent_with_the_review_row_so_twins_and_failed_inserts_spend_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    await app.set_policy(env, ADMIN, "auto_send_graduated")
    fake = peers(env)
    fake.category_state, fake.dial = "auto_notify", Dial(0.7, False, 0.0, 2)

    async def twin() -> Review:
        return (
            await app.submit(
                env,
                AGENT,
                app.SubmitRequest(
                    kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="k1", confidence=0.9
                ),
            )
        )[1]

    twins = await asyncio.gather(twin(), twin(), twin())
    assert {r.id for r in twins} == {twins[0].id} and twins[0].state.value == "auto_sent"  # one review
    real_add = store.add_review

    def failing_add(*args: object) -> None:
        raise RuntimeError("the insert failed")

    monkeypatch.setattr(store, "add_review", failing_add)
    with pytest.raises(RuntimeError):
        await _submit(env, category_id="cat_1", confidence=0.9)
    monkeypatch.setattr(store, "add_review", real_add)
    # Neither the twins nor the failed insert spent the second unit of the cap of 2.
    second = (await _submit(env, category_id="cat_1", confidence=0.9))[1]
    assert second.state.value == "auto_sent"
    third = (await _submit(env, category_id="cat_1", confidence=0.9))[1]
    assert (third.state.value, third.gate_outcome) == ("needs_review", "held:daily_cap")


async def test_a_peer_that_is_down_fails_closed_with_nothing_written(env: Env) -> None:
    await app.set_policy(env, ADMIN, "auto_send_graduated")
    peers(env).down = True
    with pytest.raises(DomainError) as caught:
        await _submit(env, category_id="cat_1", confidence=0.9)
    assert caught.value.code is Code.UNAVAILABLE
    with pytest.raises(DomainError) as token:
        await app.set_policy(env, ADMIN, "require_review")
        await _submit(env, composition_token="tok")
    assert token.value.code is Code.UNAVAILABLE
    assert await _count(env) == 0 and await outbox(env) == []


async def test_blocks_suppression_and_quota_come_before_the_intent_gate(env: Env) -> None:
    await app.add_block(env, ADMIN, "Blocked@Acme.com")
    await app.add_suppression(env, ADMIN, "gone@acme.com")
    for address, code in (
        ("blocked@acme.com", Code.RECIPIENT_BLOCKED),
        ("gone@acme.com", Code.RECIPIENT_SUPPRESSED),
    ):
        with pytest.raises(DomainError) as caught:
            await _submit(env, Draft(**{**NO_INTENT.__dict__, "cc": [address]}))  # no intent: still this code
        assert caught.value.code is code and ("recipient", address) in caught.value.hints
    env.settings = replace(env.settings, outbound_quota_per_day=1)
    await app.set_policy(env, ADMIN, "allow_direct")
    assert (await _submit(env, NO_INTENT))[1].state.value == "auto_sent"
    with pytest.raises(DomainError) as quota:
        await _submit(env, NO_INTENT)
    assert quota.value.code is Code.QUOTA_EXCEEDED
    assert await _count(env) == 1


async def test_a_block_added_after_approval_fails_the_delivery(env: Env) -> None:
    from review_state.app import Decision

    from tests.review_state.conftest import HUMAN, opened, reasons

    review = await opened(env)
    await app.add_block(env, ADMIN, "vp@acme.com")
    failed = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert failed.state.value == "failed" and failed.send_error and "recipient_blocked" in failed.send_error
    closed = await app.cancel(env, AGENT, review.id, failed.revision, "")
    assert closed.state.value == "cancelled"
    assert await reasons(env, review.id) == ["send_failed", "cancelled"]


def test_settings_read_the_environment() -> None:
    settings = settings_from_env(
        {"REVIEWLOOP_OUTBOUND_QUOTA_PER_DAY": "5", "REVIEWLOOP_DELIVERY_LEASE_S": "2"}
    )
    assert settings.outbound_quota_per_day == 5 and settings.delivery_lease == timedelta(seconds=2)


async def test_a_known_contact_passes_the_first_contact_gate(env: Env) -> None:
    await app.set_policy(env, ADMIN, "auto_send_graduated")
    fake = peers(env)
    fake.category_state, fake.dial = "auto_notify", Dial(0.7, True, 0.0, 200)
    assert (await _submit(env, category_id="cat_1", confidence=0.9))[1].gate_outcome == "held:first_contact"
    await app.record_inbound(
        env, ADMIN, from_address="VP@acme.com", to=["us@x.com"], cc=[], subject="hi", body_text="", headers={}
    )
    assert (await _submit(env, category_id="cat_1", confidence=0.9))[1].state.value == "auto_sent"


@pytest.mark.parametrize(
    ("policy", "has_intent", "mode", "expected"),
    [
        # The policy wins: direct is honoured only under allow_direct, the policy that sends without review.
        ("require_review", True, "direct", Route.QUEUE),
        ("require_review", False, "direct", None),
        ("allow_direct", True, "direct", Route.DIRECT),
        ("allow_direct", False, "direct", Route.DIRECT),
        ("allow_direct", False, "review", None),  # review needs an intent, whatever the policy
        ("allow_direct", False, "", Route.DIRECT),
        ("auto_send_graduated", True, "direct", Route.AUTO_CANDIDATE),  # every gate and the cap still apply
        ("auto_send_graduated", False, "direct", None),
        ("auto_send_graduated", True, "review", Route.QUEUE),
    ],
)
def test_the_mode_refines_the_policy_table_but_never_overrides_it(
    policy: str, has_intent: bool, mode: str, expected: Route | None
) -> None:
    intent = DRAFT.intent if has_intent else None
    if expected is None:
        with pytest.raises(DomainError) as refused:
            route_for(Policy(policy), intent, mode=mode)
        assert refused.value.code is Code.INTENT_REQUIRED
    else:
        assert route_for(Policy(policy), intent, mode=mode) is expected


async def test_marking_contacts_is_one_statement_and_keeps_the_first_contact(env: Env) -> None:
    first = utcnow()
    later = first + timedelta(hours=1)
    async with env.db.transaction() as uow:
        await store.mark_contacted(uow.conn, AGENT.project_id, ["VP@acme.com"], first)
    with statements(env.db) as seen:
        async with env.db.transaction() as uow:
            await store.mark_contacted(uow.conn, AGENT.project_id, ["vp@acme.com", "cto@acme.com"], later)
    assert len(seen) == 1
    async with env.db.engine.connect() as conn:
        rows = await conn.execute(select(contacts.c.address, contacts.c.contacted_at))
        contacted = {row.address: row.contacted_at for row in rows}
    assert contacted == {"vp@acme.com": first, "cto@acme.com": later}


async def test_a_delivery_marks_only_the_recipients_it_contacts_first(env: Env) -> None:
    """A recipient once contacted stays so: a delivery writes the contacts its own check read as new, and
    none when there are none."""
    await app.set_policy(env, ADMIN, "allow_direct")
    assert (await _submit(env, NO_INTENT))[1].state.value == "auto_sent"
    with statements(env.db) as seen:
        assert (await _submit(env, NO_INTENT))[1].state.value == "auto_sent"
    assert not [s.sql for s in seen if "INSERT INTO contacts" in s.sql]
    with statements(env.db) as seen:
        wider = replace(NO_INTENT, cc=["CTO@acme.com"])
        assert (await _submit(env, wider))[1].state.value == "auto_sent"
    marked = [s for s in seen if "INSERT INTO contacts" in s.sql]
    assert len(marked) == 1
    async with env.db.engine.connect() as conn:
        rows = await conn.execute(select(contacts.c.address, contacts.c.contacted_at))
        contacted = {row.address for row in rows if row.contacted_at is not None}
    assert contacted == {a.lower() for a in [*NO_INTENT.to, "CTO@acme.com"]}


async def test_first_contacts_of_a_page_are_one_read_whatever_its_length(env: Env) -> None:
    """The queue's first-contact badge: a draft is one when any recipient (to, cc or bcc, any case) was
    never mailed nor heard from; one statement answers it for a whole page."""
    async with env.db.transaction() as uow:
        await store.mark_contacted(uow.conn, AGENT.project_id, ["vp@acme.com"], utcnow())
    known = await queued(env)
    new = await queued(env, replace(DRAFT, to=["New@Acme.com"]))
    mixed = await queued(env, replace(DRAFT, bcc=["cfo@acme.com"]))
    shouted = await queued(env, replace(DRAFT, to=["VP@ACME.COM"]))
    reviews, _ = await app.list_reviews(env, HUMAN, cursor="", limit=0)
    with statements(env.db) as seen:
        first = await app.first_contacts(env, HUMAN, reviews)
    assert len(seen) == 1
    assert first == {new.id, mixed.id}
    assert known.id not in first and shouted.id not in first
