"""A retry whose twin remembers the Idempotency-Key while it is running gets the twin's answer.

A use case that asks ``replayed`` first (submit), reads the key with its review in ``precheck`` (decide,
redraft, restamp), or reads it with its review in its unit of work's first statement (open, cancel,
chat) does not read the key again before its compare-and-set; these tests let the twin commit in exactly
that gap.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from review_state import app
from review_state.app import Decision, Env, Revision, _kernel
from review_state.app import composer as composer_app
from review_state.app import submission as submission_app
from review_state.domain.submission import Draft
from review_state.store.tables import reviews
from reviewloop.errors import Code, DomainError
from sqlalchemy import event, func, select

from tests.review_state.conftest import AGENT, DRAFT, HUMAN, queued, reasons
from tests.statements import statements


def twin_in_the_gap(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, twin: Callable[[], Awaitable[Any]]
) -> list[Any]:
    """Patch ``module.name`` (a step between the replay check and the unit of work) so that, once its first
    call is done, ``twin`` runs to its commit; the twin's answer is the list's one item."""
    real = getattr(module, name)
    answers: list[Any] = []

    async def step(*args: Any, **kwargs: Any) -> Any:
        done = await real(*args, **kwargs)
        if not answers:
            answers.append(None)  # the twin's own call of this step goes straight through
            answers[0] = await twin()
        return done

    monkeypatch.setattr(module, name, step)
    return answers


async def count_reviews(env: Env) -> int:
    async with env.db.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(reviews))).scalar_one())


async def test_a_submit_whose_twin_committed_first_is_that_review(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def submit() -> Any:
        return await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="k")
        )

    twin = twin_in_the_gap(monkeypatch, submission_app, "sending_facts", submit)
    status, review = await submit()  # its insert of the key meets the twin's: rolled back, replayed
    assert review.id == twin[0][1].id and status == twin[0][0]
    assert await count_reviews(env) == 1


async def test_a_redraft_whose_twin_committed_first_gets_the_twins_revision(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    review = await queued(env)

    async def redraft() -> Any:
        return await app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="b"), idempotency_key="k")
        )

    twin = twin_in_the_gap(monkeypatch, composer_app, "contacts_allow", redraft)
    again = await redraft()  # its compare-and-set fails on the twin's revision: replayed, not a 409
    assert again.revision == twin[0].revision == 2 and again.version == twin[0].version


async def test_an_approve_whose_twin_committed_first_is_answered_and_sends_once(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    review = await queued(env)
    opened = await app.open_review(env, HUMAN, review.id, 1, review.version)
    approve = Decision(action="approve", revision=1, version=opened.version)

    async def decide() -> Any:
        return await app.decide(env, HUMAN, review.id, approve, idempotency_key="k")

    twin = twin_in_the_gap(monkeypatch, _kernel, "precheck", decide)
    answered = await decide()
    assert answered.id == twin[0].id and answered.state.value == "sent"
    assert await reasons(env, review.id) == ["sent"]  # one delivery, one terminal nudge


async def test_a_refusal_with_no_twin_is_still_the_refusal(env: Env) -> None:
    review = await queued(env)
    await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="b"), idempotency_key="k1")
    )
    with pytest.raises(DomainError) as caught:  # revision 1 is gone, and no twin holds "k2"
        await app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="c"), idempotency_key="k2")
        )
    assert caught.value.code.value in ("stale", "wrong_state")


async def test_a_keyed_decision_reads_its_review_and_its_key_in_one_statement(env: Env) -> None:
    """The precheck's read carries the key's row: a first call reads once before its unit of work, and
    its retry is answered from that one read; the key with another body is a conflict that writes
    nothing."""
    review = await queued(env)
    opened = await app.open_review(env, HUMAN, review.id, 1, review.version)
    escalate = Decision(action="escalate", revision=1, version=opened.version)
    with statements(env.db) as seen:
        escalated = await app.decide(env, HUMAN, review.id, escalate, idempotency_key="k")
    reads = [s.sql for s in seen if s.sql.startswith("SELECT")]
    assert len(reads) == 1 and "idempotency_keys" in reads[0], reads
    with statements(env.db) as seen:
        again = await app.decide(env, HUMAN, review.id, escalate, idempotency_key="k")
    assert (again.state, again.version) == (escalated.state, escalated.version)
    assert len(seen) == 1, [s.sql for s in seen]
    reject = Decision(action="reject", revision=1, version=escalated.version)
    with pytest.raises(DomainError) as caught:
        await app.decide(env, HUMAN, review.id, reject, idempotency_key="k")
    assert caught.value.code is Code.IDEMPOTENCY_CONFLICT
    now, _ = await app.get_review(env, HUMAN, review.id)
    assert (now.state, now.version) == (escalated.state, escalated.version)


async def test_a_keyed_open_reads_its_key_with_its_review_in_its_unit_of_work(env: Env) -> None:
    """An open (like a cancel or a chat) reads its key in the statement that loads its review: one
    read in its unit of work, a retry answered by that read alone, another body under the key refused."""
    review = await queued(env)
    with statements(env.db) as seen:
        opened = await app.open_review(env, HUMAN, review.id, 1, review.version, idempotency_key="o")
    reads = [s.sql for s in seen if s.sql.startswith("SELECT")]
    assert len(reads) == 1 and "idempotency_keys" in reads[0], reads
    with statements(env.db) as seen:
        again = await app.open_review(env, HUMAN, review.id, 1, review.version, idempotency_key="o")
    assert (again.state, again.version) == (opened.state, opened.version)
    assert len(seen) == 1, [s.sql for s in seen]
    with pytest.raises(DomainError) as caught:
        await app.open_review(env, HUMAN, review.id, 1, review.version + 1, idempotency_key="o")
    assert caught.value.code is Code.IDEMPOTENCY_CONFLICT


async def test_an_open_whose_twin_committed_after_its_read_is_the_twins_answer(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env.db.is_sqlite:
        pytest.skip("SQLite's one writer: no twin commits inside another's unit of work")
    review = await queued(env)

    async def open_it() -> Any:
        return await app.open_review(env, HUMAN, review.id, 1, review.version, idempotency_key="o")

    twin = twin_in_the_gap(monkeypatch, _kernel, "_keyed", open_it)
    answered = await open_it()  # its compare-and-set fails on the twin's version: replayed, not a 409
    assert (answered.state.value, answered.version) == ("in_review", twin[0].version)
    _, turns = await app.get_review(env, HUMAN, review.id)
    assert [t.turn_type for t in turns].count("opened") == 1


async def test_a_keyed_submit_reads_its_key_and_its_recipients_on_one_connection(env: Env) -> None:
    """Two pool checkouts: the reads before the peers (the key's replay, the contacts' facts), then the
    unit of work; its retry is answered after the first."""
    checkouts: list[object] = []

    def count(*_: object) -> None:
        checkouts.append(None)

    pool = env.db.engine.sync_engine.pool
    event.listen(pool, "checkout", count)
    try:
        _, review = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="s")
        )
        assert len(checkouts) == 2
        _, again = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="s")
        )
        assert again.id == review.id and len(checkouts) == 3
    finally:
        event.remove(pool, "checkout", count)


async def test_a_keyed_send_reads_its_key_and_its_recipients_facts_in_one_statement(env: Env) -> None:
    """A send's recipients are its draft's own: its key's replay and their facts are one read. Its retry
    is answered from that read (and the review it names); another body under the key is refused."""
    with statements(env.db) as seen:
        _, review = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="f")
        )
    reads = [s.sql for s in seen if s.sql.startswith("SELECT")]
    assert len(reads) == 1 and "idempotency_keys" in reads[0] and "contacts" in reads[0], reads
    with statements(env.db) as seen:
        _, again = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="f")
        )
    assert again.id == review.id and len(seen) == 2, [s.sql for s in seen]
    other = Draft(**{**DRAFT.__dict__, "subject": "another"})
    with pytest.raises(DomainError) as caught:
        await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=other, category_id="", idempotency_key="f")
        )
    assert caught.value.code is Code.IDEMPOTENCY_CONFLICT
    assert await count_reviews(env) == 1


async def test_a_keyed_submit_writes_its_review_revision_and_key_in_one_statement_on_postgresql(
    env: Env,
) -> None:
    """The unit of work's rows are queued and written together: one statement on PostgreSQL (its
    review, first revision and key), a row at a time on SQLite; its retry finds them all."""
    with statements(env.db) as seen:
        _, review = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="w")
        )
    writes = [s.sql for s in seen if not s.sql.startswith(("SELECT", "COMMIT"))]
    if env.db.is_sqlite:
        assert [w.split("(")[0].strip() for w in writes] == [
            "INSERT INTO reviews",
            "INSERT INTO review_revisions",
            "INSERT INTO idempotency_keys",
        ]
    else:
        assert len(writes) == 1, writes
        assert all(
            f"INSERT INTO {t} " in writes[0] for t in ("reviews", "review_revisions", "idempotency_keys")
        )
    _, again = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="w")
    )
    assert again.id == review.id and await count_reviews(env) == 1
