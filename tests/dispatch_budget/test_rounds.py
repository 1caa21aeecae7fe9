"""Reviewer round budget (spec 003) on SQLite and PostgreSQL: admissions, receipts, settlements,
the no-verdict cap, scopes, and the scoped extension with the spec's "Validation MUST cover" list."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from dispatch_budget.domain.budget import AttemptKind, ExtensionInput, RunStatus, Trigger
from reviewloop.errors import Code, DomainError
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, make_engine
from reviewloop.tenancy import ActorKind, Principal

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_1")
REVIEWER = Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_rev")
ADMIN = Principal("org_1", "prj_1", ActorKind.ADMIN, "key_admin")
ADMIN_ORIGIN = app.Origin("admin", "key_admin", "key_admin", "127.0.0.1")
HEAD = "a" * 40
NEW_HEAD = "b" * 40
SELECTION = {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "cold"}


async def _run(db: Database, run_id: str = "run_1", pr: int = 0, **kw: Any) -> app.Run:
    status = kw.pop("status", None)
    return await app.record_run(
        db,
        REVIEWER if status in (None, RunStatus.ACTIVE) else ADMIN,
        app.RunSnapshot(
            run_id=run_id, repository="acme/api", pr_number=pr, head_sha=kw.pop("head", HEAD), status=status
        ),
    )


async def _admit(
    db: Database, key: str, run_id: str = "run_1", trigger: Trigger = Trigger.OPERATOR_REQUEST, **kw: Any
) -> app.Admission:
    return await app.admit_review_round(
        db,
        REVIEWER,
        app.AdmissionRequest(
            run_id=run_id,
            attempt_key=key,
            kind=kw.pop("kind", AttemptKind.INITIAL),
            trigger=trigger,
            head_sha=kw.pop("head", HEAD),
            selection=SELECTION,
            **kw,
        ),
    )


def _grant_input(
    new_limit: int = 7,
    expected: int = 5,
    key: str = "grant-1",
    head: str = HEAD,
    brief: str = "fix the auth race only",
) -> ExtensionInput:
    return ExtensionInput(
        head_sha=head,
        new_limit=new_limit,
        expected_prior_limit=expected,
        scope_brief=brief,
        idempotency_key=key,
    )


async def _extend(
    db: Database,
    request: ExtensionInput,
    run_id: str = "run_1",
    principal: Principal = ADMIN,
    origin: app.Origin = ADMIN_ORIGIN,
) -> app.ExtensionReceipt:
    return await app.extend_review_budget(db, principal, run_id=run_id, request=request, origin=origin)


async def _refused(awaitable: Awaitable[object]) -> DomainError:
    try:
        await awaitable
    except DomainError as error:
        return error
    raise AssertionError("expected a refusal")


async def test_a_sixth_round_is_refused_before_anything_is_consumed(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    kinds = list(AttemptKind)
    for i in range(5):  # every kind of reviewer attempt spends the same budget
        admission = await _admit(db, f"a{i}", kind=kinds[i])
        assert admission.receipt.round == i + 1 and not admission.reattached
    error = await _refused(_admit(db, "a5"))
    assert error.code is Code.QUOTA_EXCEEDED
    assert "5/5" in error.detail and "Stop and diagnose" in error.detail
    assert (await app.get_round_budget(db, REVIEWER, "run_1")).last_launch_refusal is None  # wrote nothing
    assert "narrow the scope or redesign" in error.detail
    budget = await app.get_round_budget(db, REVIEWER, "run_1")
    assert (budget.budget.admissions, budget.budget.used, budget.budget.label) == (5, 5, "5/5")


async def test_a_spent_budget_never_blocks_publication(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    for i in range(5):
        await _admit(db, f"a{i}")
    assert (await app.get_round_budget(db, REVIEWER, "run_1")).budget.exhausted
    # The approvals hold elsewhere; the spent budget only stops further reviewer rounds.
    published = await _run(db, status=RunStatus.PUBLISHED)
    assert published.status is RunStatus.PUBLISHED
    assert (await _refused(_admit(db, "after-publish"))).code is Code.WRONG_STATE


async def test_reattaching_reuses_the_receipt_and_spends_nothing(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    first = await _admit(db, "run_1:gen1:row1")
    again = await _admit(db, "run_1:gen1:row1")
    assert again.reattached and again.receipt.receipt_id == first.receipt.receipt_id
    assert again.budget.budget.used == 1
    # A replay at a new engine generation is a new attempt.
    assert not (await _admit(db, "run_1:gen2:row1")).reattached


async def test_two_admissions_racing_for_the_last_round_admit_exactly_one(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    for i in range(4):
        await _admit(db, f"a{i}")

    async def attempt(key: str) -> str:
        try:
            return (await _admit(db, key)).receipt.receipt_id
        except DomainError as error:
            return error.code.value

    outcomes = await asyncio.gather(attempt("race-1"), attempt("race-2"))
    assert sorted(o.startswith("rcpt_") for o in outcomes) == [False, True]
    assert Code.QUOTA_EXCEEDED.value in outcomes
    assert (await app.get_round_budget(db, REVIEWER, "run_1")).budget.used == 5


async def test_a_restart_between_admission_and_settlement_refunds_nothing(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    admitted = await _admit(db, "k1")
    url = db.engine.url.render_as_string(hide_password=False)
    await db.dispose()  # the service restarts
    restarted = Database(make_engine(url))
    try:
        budget = await app.get_round_budget(restarted, REVIEWER, "run_1")
        assert budget.budget.used == 1  # an unsettled receipt counts: fail closed
        again = await _admit(restarted, "k1")  # the restart re-enters DISPATCH at the same generation
        assert again.reattached and again.receipt.receipt_id == admitted.receipt.receipt_id
        assert again.budget.budget.used == 1
    finally:
        await restarted.dispose()


async def test_no_verdict_spends_no_round_and_a_late_verdict_counts_again(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    admitted = await _admit(db, "k1")
    receipt, budget = await app.settle_attempt(
        db, REVIEWER, receipt_id=admitted.receipt.receipt_id, no_verdict_reason="timed_out"
    )
    assert (
        receipt.outcome == "no_verdict" and receipt.reason == "timed_out" and receipt.settled_at is not None
    )
    assert (budget.budget.used, budget.budget.no_verdict) == (0, 1)
    assert budget.budget.label == "0/5 (no-verdict 1/3)"
    # A retried no-verdict settlement changes nothing; the verdict recovered after a restart clears it.
    await app.settle_attempt(
        db, REVIEWER, receipt_id=admitted.receipt.receipt_id, no_verdict_reason="timed_out"
    )
    receipt, budget = await app.settle_attempt(
        db, REVIEWER, receipt_id=admitted.receipt.receipt_id, verdict="issues", reviewed_head=HEAD
    )
    assert receipt.outcome == "counted" and receipt.reason is None
    assert (budget.budget.used, budget.budget.no_verdict, budget.budget.label) == (1, 0, "1/5")
    # Counted is final: an attempt settles once.
    error = await _refused(
        app.settle_attempt(db, REVIEWER, receipt_id=admitted.receipt.receipt_id, no_verdict_reason="exited")
    )
    assert error.code is Code.CONFLICT


async def test_a_verdict_for_another_head_or_an_unknown_reason_is_refused(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    receipt_id = (await _admit(db, "k1")).receipt.receipt_id
    for kwargs, field in (
        ({"verdict": "pass", "reviewed_head": NEW_HEAD}, "/reviewed_head"),
        ({"verdict": "maybe", "reviewed_head": HEAD}, "/verdict"),
        ({"no_verdict_reason": "bored"}, "/no_verdict_reason"),
    ):
        error = await _refused(app.settle_attempt(db, REVIEWER, receipt_id=receipt_id, **kwargs))
        assert error.violations[0].field == field
    assert (await app.get_round_budget(db, REVIEWER, "run_1")).budget.used == 1


async def test_at_the_no_verdict_cap_automatic_launches_stop_but_an_operator_request_launches(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    await _run(db)
    for i, reason in enumerate(("timed_out", "launch_failed", "missing_result")):
        receipt_id = (await _admit(db, f"k{i}")).receipt.receipt_id
        await app.settle_attempt(db, REVIEWER, receipt_id=receipt_id, no_verdict_reason=reason)
    for trigger in (Trigger.FIX_REREVIEW, Trigger.RECOVERED_FIX_REREVIEW, Trigger.PUBLICATION_PLAN):
        error = await _refused(_admit(db, f"auto-{trigger}", trigger=trigger))
        assert error.code is Code.QUOTA_EXCEEDED
        assert "3 of 3" in error.detail and "missing_result" in error.detail and "timed_out" in error.detail
        # The gate records each stopped launch (the refusal outlives the refused request).
        refusal = (await app.get_round_budget(db, REVIEWER, "run_1")).last_launch_refusal
        assert refusal is not None
        assert (refusal.attempt_key, refusal.trigger, refusal.no_verdict) == (
            f"auto-{trigger}",
            trigger.value,
            3,
        )
        assert refusal.reason == error.detail
    for trigger in (Trigger.OPERATOR_REQUEST, Trigger.CONTINUE_FIXING, Trigger.SEND_BACK):
        assert not (await _admit(db, f"op-{trigger}", trigger=trigger)).reattached
    budget = await app.get_round_budget(db, REVIEWER, "run_1")
    assert budget.budget.label == "3/5 (no-verdict 3/3)" and budget.budget.no_verdict_capped


async def test_a_pr_scope_is_shared_and_copied_histories_count_once(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db, "run_1")
    first = await _admit(db, "k1", "run_1")  # before the PR exists: the canonical run's scope
    assert first.budget.scope_key == "run:run_1"
    await _run(db, "run_1", pr=7)  # verified PR identity: its admissions join the PR scope
    assert (await app.get_round_budget(db, REVIEWER, "run_1")).scope_key == "pr:acme/api#7"
    await _run(db, "run_2", pr=7)
    copied = await _admit(db, "copy", "run_2", receipt_id=first.receipt.receipt_id)
    assert copied.reattached and copied.budget.budget.used == 1  # the copied receipt is not a second round
    await _admit(db, "k2", "run_2")
    assert (await app.get_round_budget(db, REVIEWER, "run_1")).budget.used == 2  # no fresh budget for run_2
    # A run of another PR has its own budget.
    await _run(db, "run_3", pr=8)
    assert (await app.get_round_budget(db, REVIEWER, "run_3")).budget.used == 0


# --- the scoped extension: spec 003 "Validation MUST cover" ---


@pytest.mark.parametrize(
    ("principal", "origin"),
    [
        (AGENT, app.Origin("agent", "agt_1")),
        (Principal("org_1", "prj_1", ActorKind.HUMAN, "key_h"), app.Origin("human", "key_h")),
        (Principal("org_1", "prj_1", ActorKind.SYSTEM, "worker"), app.Origin("system", "worker")),
        (ADMIN, app.Origin("system", "worker")),  # a service credential stays a service
    ],
)
async def test_an_unauthorized_grant_is_refused_and_changes_nothing(
    open_db: OpenDb, principal: Principal, origin: app.Origin
) -> None:
    db = await open_db(SPEC)
    await _run(db)
    error = await _refused(_extend(db, _grant_input(), principal=principal, origin=origin))
    assert error.code is Code.FORBIDDEN_SCOPE
    assert (await app.get_round_budget(db, REVIEWER, "run_1")).budget.limit == 5


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (_grant_input(head=NEW_HEAD), Code.STALE, None),  # live-head drift
        (_grant_input(head="a" * 12), Code.BAD_REQUEST, "/head_sha"),  # not the full SHA
        (_grant_input(expected=6), Code.CONFLICT, None),  # conflicting prior limit
        (_grant_input(new_limit=5), Code.BAD_REQUEST, "/limit"),
        (_grant_input(new_limit=11), Code.BAD_REQUEST, "/limit"),
        (_grant_input(brief="   "), Code.BAD_REQUEST, "/scope_brief"),
        (_grant_input(key=""), Code.BAD_REQUEST, "/idempotency_key"),
        (_grant_input(expected=0), Code.BAD_REQUEST, "/expected_limit"),
    ],
)
async def test_a_stale_or_invalid_grant_is_refused_before_any_mutation(
    open_db: OpenDb, request_: ExtensionInput, code: Code, field: str | None
) -> None:
    db = await open_db(SPEC)
    await _run(db)
    error = await _refused(_extend(db, request_))
    assert error.code is code
    if field:
        assert error.violations[0].field == field
    budget = await app.get_round_budget(db, REVIEWER, "run_1")
    assert budget.budget.limit == 5 and budget.extension is None


@pytest.mark.parametrize("status", [RunStatus.PUBLISHED, RunStatus.ARCHIVED])
async def test_a_published_or_archived_run_is_not_extended(open_db: OpenDb, status: RunStatus) -> None:
    db = await open_db(SPEC)
    await _run(db, status=status)
    assert (await _refused(_extend(db, _grant_input()))).code is Code.WRONG_STATE


async def test_a_failed_or_interrupted_run_can_be_extended_but_an_unrelated_one_cannot(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    await _run(db, status=RunStatus.FAILED)
    assert (await _extend(db, _grant_input())).new_limit == 7
    other = Principal("org_2", "prj_9", ActorKind.ADMIN, "key_other")
    error = await _refused(
        app.extend_review_budget(
            db, other, run_id="run_1", request=_grant_input(key="g2"), origin=ADMIN_ORIGIN
        )
    )
    assert error.code is Code.NOT_FOUND


async def test_the_receipt_records_provenance_and_an_exact_retry_returns_it(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db, pr=42)
    receipt = await _extend(db, _grant_input())
    assert {
        k: getattr(receipt, k)
        for k in ("run_id", "repository", "pr_number", "approved_head", "prior_limit", "new_limit")
    } == {
        "run_id": "run_1",
        "repository": "acme/api",
        "pr_number": 42,
        "approved_head": HEAD,
        "prior_limit": 5,
        "new_limit": 7,
    }
    assert receipt.scope_brief == "fix the auth race only" and receipt.idempotency_key == "grant-1"
    assert receipt.origin.actor_id == "key_admin" and receipt.granted_at
    assert await _extend(db, _grant_input()) == receipt  # exact retry, even though 5 is no longer current
    error = await _refused(_extend(db, _grant_input(new_limit=8)))  # same key, other inputs
    assert error.code is Code.IDEMPOTENCY_CONFLICT
    budget = await app.get_round_budget(db, REVIEWER, "run_1")
    assert budget.budget.label == "0/7" and budget.extension == receipt


async def test_sixth_and_seventh_admissions_are_real_after_a_bounded_grant(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    admitted = [await _admit(db, f"k{i}") for i in range(5)]
    assert (await _refused(_admit(db, "k5"))).code is Code.QUOTA_EXCEEDED
    await _extend(db, _grant_input(new_limit=7))
    assert (await _admit(db, "k5")).receipt.round == 6
    assert (await _admit(db, "k6")).receipt.round == 7
    error = await _refused(_admit(db, "k7"))
    assert "7/7" in error.detail
    # Existing admissions are unchanged by the grant.
    assert [(await _admit(db, f"k{i}")).receipt for i in range(5)] == [a.receipt for a in admitted]


async def test_concurrent_grants_apply_once_and_serialize_with_admissions(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db)
    for i in range(4):
        await _admit(db, f"k{i}")

    async def outcome(awaitable: Awaitable[object]) -> str:
        try:
            await awaitable
            return "ok"
        except DomainError as error:
            return error.code.value

    results = await asyncio.gather(
        outcome(_extend(db, _grant_input(new_limit=6, key="g1"))),
        outcome(_extend(db, _grant_input(new_limit=8, key="g2"))),
        outcome(_admit(db, "k4")),
        outcome(_admit(db, "k5")),
        outcome(_admit(db, "k6")),
    )
    grants, admits = results[:2], results[2:]
    assert grants.count("ok") == 1 and Code.CONFLICT.value in grants  # the CAS lets one grant win
    budget = (await app.get_round_budget(db, REVIEWER, "run_1")).budget
    assert budget.limit in (6, 8) and budget.used == 4 + admits.count("ok") <= budget.limit


async def test_restart_and_archive_preserve_the_scope_and_its_grant(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _run(db, "run_1", pr=9)
    for i in range(5):
        await _admit(db, f"k{i}", "run_1")
    receipt = await _extend(db, _grant_input(new_limit=6))
    await _run(db, "run_1", pr=9, status=RunStatus.ARCHIVED)
    url = db.engine.url.render_as_string(hide_password=False)
    await db.dispose()
    restarted = Database(make_engine(url))
    try:
        await _run(restarted, "run_2", pr=9)  # a new run for the same PR: no fresh default budget
        budget = await app.get_round_budget(restarted, REVIEWER, "run_2")
        assert budget.budget.label == "5/6" and budget.extension == receipt
        assert await _extend(restarted, _grant_input(new_limit=6)) == receipt  # replay applies nothing twice
        assert (await _admit(restarted, "k5", "run_2")).receipt.round == 6
        assert (await _refused(_admit(restarted, "k6", "run_2"))).code is Code.QUOTA_EXCEEDED
    finally:
        await restarted.dispose()


async def test_run_status_takes_an_admin_or_the_owning_service_and_settlements_their_owner(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    await _run(db)
    service = Principal("org_1", "prj_1", ActorKind.SYSTEM, "orchestrator")
    for status in (RunStatus.FAILED, RunStatus.ARCHIVED, RunStatus.PUBLISHED):
        for who in (REVIEWER, AGENT):
            error = await _refused(
                app.record_run(
                    db,
                    who,
                    app.RunSnapshot(
                        run_id="run_1", repository="acme/api", pr_number=0, head_sha=HEAD, status=status
                    ),
                )
            )
            assert error.code is Code.FORBIDDEN_SCOPE
    assert (await _run(db)).status is RunStatus.ACTIVE  # nothing was written
    admitted = await _admit(db, "k1")
    # The owning service is not the admission owner of a review agent's receipt.
    for who in (service, AGENT, ADMIN, Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_other")):
        error = await _refused(
            app.settle_attempt(db, who, receipt_id=admitted.receipt.receipt_id, no_verdict_reason="exited")
        )
        assert error.code is Code.FORBIDDEN_SCOPE
    assert (await app.get_round_budget(db, REVIEWER, "run_1")).budget.used == 1
    failed = await app.record_run(
        db,
        service,
        app.RunSnapshot(
            run_id="run_1", repository="acme/api", pr_number=0, head_sha=HEAD, status=RunStatus.FAILED
        ),
    )
    assert failed.status is RunStatus.FAILED
