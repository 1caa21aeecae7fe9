"""Use cases of spec 003's round budget: runs, admissions, settlements, scoped extensions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.review_dispatch.selection import (
    configured_rows,
    project_default_mode,
    required_reviews,
    validate_sequence,
)
from reviewloop.storage import Database, utcnow
from reviewloop.storage.idempotency import request_hash
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget import store
from dispatch_budget.app.authority import (
    RUN_OWNERS,
    check_owns_run,
    check_reviewer_plane,
    check_run_owner,
    check_settler,
    principal_ref,
)
from dispatch_budget.domain.budget import (
    MAX_REVIEW_ROUNDS,
    ExtensionInput,
    NoVerdictReason,
    ReviewRoundBudget,
    RunStatus,
    Trigger,
    check_admission,
    validate_extension_shape,
)
from dispatch_budget.domain.qualifying import rows_of, tally
from dispatch_budget.domain.rounds import (
    AdmissionRequest,
    Budget,
    ExtensionReceipt,
    LaunchRefusal,
    Origin,
    Outcome,
    ReadyGate,
    Receipt,
    Run,
    RunSnapshot,
    Settlement,
    check_grant,
    grant_receipt,
    journal_settlement,
    next_run,
    ready_gate,
    reported_settlement,
    run_not_found,
    settlement_to_write,
)


@dataclass(frozen=True)
class Admission:
    receipt: Receipt
    reattached: bool
    budget: Budget


async def record_run(db: Database, principal: Principal, snapshot: RunSnapshot) -> Run:
    """Store a run's snapshot. A run that gains a verified repository/PR identity joins the shared PR
    scope, bringing its admissions and grants; the PR scope's limit is the larger of the two. Unset
    review-mode rungs keep what the run had. The caller owns a run it creates; a service key changes
    the status only of its own runs."""
    snapshot.check()
    status = snapshot.status
    if principal.actor_kind not in RUN_OWNERS:
        check_reviewer_plane(principal, "Recording a review run")
    if status not in (None, RunStatus.ACTIVE):
        check_run_owner(principal, f"Marking a run {status}")
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        prior = await store.get_run(conn, project, snapshot.run_id)
        if prior is not None and status not in (None, RunStatus.ACTIVE):
            check_owns_run(principal, f"Marking a run {status}", snapshot.run_id, prior.owner)
        if snapshot.review_sequence:
            catalog = await store.runner_catalog(conn, project)
            rows = tuple(s.to_json() for s in validate_sequence(list(snapshot.review_sequence), catalog))
            snapshot = replace(snapshot, review_sequence=rows)
        run = next_run(prior, snapshot, owner=principal_ref(principal))
        if prior is None:
            await store.add_run(conn, project, run, utcnow())
        else:
            await store.update_run(conn, project, run, utcnow())
            if prior.scope_key != run.scope_key:
                await _merge_scope(conn, project, prior.scope_key, run.scope_key)
        return run


async def _merge_scope(conn: AsyncConnection, project: str, old: str, new: str) -> None:
    old_limit = await store.lock_scope(conn, project, old, MAX_REVIEW_ROUNDS)
    new_limit = await store.lock_scope(conn, project, new, MAX_REVIEW_ROUNDS)
    await store.move_to_scope(conn, project, old, new)
    if old_limit > new_limit:
        await store.set_round_limit(conn, project, new, old_limit)


async def _budget(conn: AsyncConnection, project: str, key: str, limit: int) -> Budget:
    total, no_verdict = await store.scope_counts(conn, project, key)
    return Budget(
        key,
        ReviewRoundBudget(total, no_verdict, limit),
        await store.latest_extension(conn, project, key),
        await store.latest_launch_refusal(conn, project, key),
    )


async def admit_review_round(db: Database, principal: Principal, request: AdmissionRequest) -> Admission:
    """Persist an admission receipt before the runner starts, or refuse before anything is consumed.
    A reattach (same attempt key, or a copied history's receipt id) reuses its receipt and settlement.
    Naming the spec 001 ``session_id`` ties the attempt to that session's review in flight, so its
    timeout settles it; ``review_session_id`` names the reviewer session it runs in."""
    check_reviewer_plane(principal, "Admitting a reviewer round")
    request.check()
    run_id, receipt_id, attempt_key = request.run_id, request.receipt_id, request.attempt_key
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        run = await store.get_run(conn, project, run_id)
        if run is None:
            raise run_not_found(run_id)
        limit = await store.lock_scope(conn, project, run.scope_key, MAX_REVIEW_ROUNDS)
        if receipt_id:
            existing = await store.admission(conn, project, receipt_id)
        else:
            existing = await store.admission_for_attempt(conn, project, attempt_key)
        if existing is not None:
            if existing.scope_key != run.scope_key:
                raise DomainError(
                    Code.NOT_FOUND, f"Receipt {existing.receipt_id} does not belong to run {run_id}'s scope."
                )
            return Admission(existing, True, await _budget(conn, project, run.scope_key, limit))
        if receipt_id:
            raise DomainError(Code.NOT_FOUND, f"No admission receipt {receipt_id} is visible to this key.")
        if run.closed:
            raise DomainError(Code.WRONG_STATE, f"Run {run_id} is {run.status}; it admits no reviewer.")
        selection = request.selection
        if selection and not selection.get("mode"):
            # Admission uses resolveReviewMode's precedence: the run's stored rungs, the project's
            # configured default, then COLD.
            configured = project_default_mode(await store.review_config.read(conn, project))
            mode, _ = run.modes.resolve(None, configured)
            selection = {**selection, "mode": mode.value}
        # The check needs only the counts; the grant and the last refusal are for the answer below.
        budget = ReviewRoundBudget(*await store.scope_counts(conn, project, run.scope_key), limit)
        refusal = await _refusal(conn, project, run, attempt_key, request.trigger, budget)
        if refusal is None:
            receipt = Receipt(
                receipt_id=new_id("rcpt"),
                run_id=run_id,
                scope_key=run.scope_key,
                attempt_key=attempt_key,
                kind=request.kind,
                trigger=request.trigger,
                head_sha=request.head_sha or run.head_sha,
                selection=selection,
                admitted_at=utcnow(),
                round=budget.used + 1,
                admitted_by=principal_ref(principal),
                review_session_id=request.review_session_id,
            )
            await store.add_admission(conn, project, receipt)
            if request.session_id:
                await store.link_in_flight_receipt(conn, project, request.session_id, receipt.receipt_id)
            return Admission(receipt, False, await _budget(conn, project, run.scope_key, limit))
    raise refusal  # recorded, and committed with the transaction above


async def _refusal(
    conn: AsyncConnection,
    project: str,
    run: Run,
    attempt_key: str,
    trigger: Trigger,
    budget: ReviewRoundBudget,
) -> DomainError | None:
    """None when the launch may go. A spent budget raises before anything is written; an automatic
    launch stopped at the no-verdict cap is recorded by the gate (spec 003) and returned to raise."""
    try:
        check_admission(budget, trigger, await store.last_failures(conn, project, run.scope_key))
    except DomainError as error:
        if budget.exhausted:
            raise
        refusal = LaunchRefusal(run.run_id, attempt_key, trigger, budget.no_verdict, error.detail, utcnow())
        await store.record_launch_refusal(conn, project, run.scope_key, refusal)
        return error
    return None


async def settle_attempt(
    db: Database,
    principal: Principal,
    *,
    receipt_id: str,
    verdict: str = "",
    reviewed_head: str = "",
    no_verdict_reason: str = "",
    journal_run_id: str = "",
    diff_scope: Any = None,
) -> tuple[Receipt, Budget]:
    """Settle an attempt once. Counted: a pass or issues verdict for the reviewed head (records no
    settlement). No-verdict: one of the spec's ends, recorded with reason and time; it spends no round.
    A verdict arriving after a no-verdict settlement clears it, and the attempt counts."""
    check_reviewer_plane(principal, "Settling a review attempt")
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        receipt = await store.admission(conn, project, receipt_id)
        if receipt is None:
            raise DomainError(Code.NOT_FOUND, f"No admission receipt {receipt_id} is visible to this key.")
        check_settler(principal, receipt_id, receipt.admitted_by)
        limit = await store.lock_scope(conn, project, receipt.scope_key, MAX_REVIEW_ROUNDS)
        if journal_run_id:
            settlement = journal_settlement(
                await store.closing_turn(conn, project, journal_run_id),
                receipt.head_sha,
                journal_run_id,
                session=receipt.review_session_id,
            )
        else:
            settlement = reported_settlement(
                receipt.head_sha, verdict, reviewed_head, no_verdict_reason, diff_scope
            )
        write = settlement_to_write(receipt_id, receipt.outcome, settlement, receipt.evidence)
        if write is not None:
            receipt = await store.settle_admission(conn, receipt_id, receipt.outcome, write, utcnow())
        return receipt, await _budget(conn, project, receipt.scope_key, limit)


async def settle_timed_out(conn: AsyncConnection, project: str, receipt_id: str) -> None:
    """The owning service ends an admitted attempt its session timed out (spec 001 timeoutMinutes): an
    unsettled receipt settles no-verdict ``timed_out``; a settled one keeps its settlement."""
    receipt = await store.admission(conn, project, receipt_id)
    if receipt is None or receipt.outcome is not None:
        return
    # No scope lock: the caller holds the session's row, which an admission naming the session takes
    # after the scope's (a deadlock the other way round). The write is a compare-and-set on an
    # unsettled receipt, and a round freed beside a concurrent admission only fails closed.
    timed_out = Settlement(Outcome.NO_VERDICT, NoVerdictReason.TIMED_OUT.value)
    await store.settle_admission(conn, receipt_id, None, timed_out, utcnow())


async def get_run(db: Database, principal: Principal, run_id: str) -> Run:
    """The run as recorded; any key of the project reads it."""
    async with db.single_statement.connect() as conn:
        run = await store.get_run(conn, principal.project_id, run_id)
    if run is None:
        raise run_not_found(run_id)
    return run


async def get_round_budget(db: Database, principal: Principal, run_id: str) -> Budget:
    async with db.engine.connect() as conn:
        run = await store.get_run(conn, principal.project_id, run_id)
        if run is None:
            raise run_not_found(run_id)
        limit = await store.round_limit(conn, principal.project_id, run.scope_key)
        return await _budget(conn, principal.project_id, run.scope_key, limit or MAX_REVIEW_ROUNDS)


async def get_ready_gate(db: Database, principal: Principal, run_id: str) -> ReadyGate:
    """The ready-gate payload a publication gate reads for the run's current head."""
    project = principal.project_id
    async with db.engine.connect() as conn:
        run = await store.get_run(conn, project, run_id)
        if run is None:
            raise run_not_found(run_id)
        limit = await store.round_limit(conn, project, run.scope_key) or MAX_REVIEW_ROUNDS
        budget = await _budget(conn, project, run.scope_key, limit)
        attempts = await store.gate_attempts(conn, project, run.scope_key, run.head_sha)
        sessions = await store.session_facts(conn, project, [a.review_session_id for a in attempts])
        sequence: list[dict[str, str]] = list(run.review_sequence)
        required = len(sequence)
        if not sequence:
            # Runs without a sequence take their rows from the project review configuration.
            config = await store.review_config.read(conn, project)
            sequence = configured_rows(config)
            required = required_reviews(config)
    rows = rows_of(sequence, required)
    found = tally(run.head_sha, rows, attempts, sessions, repository=run.repository, pr_number=run.pr_number)
    return ready_gate(run, budget, found)


async def extend_review_budget(
    db: Database,
    principal: Principal,
    *,
    run_id: str,
    request: ExtensionInput,
    origin: Origin,
    request_id: str = "",
) -> ExtensionReceipt:
    """run.extendReviewBudget: an admin's scoped, compare-and-set grant of one to five more rounds.
    Every check runs before any write; the receipt is persisted in the same transaction that raises
    the limit, under the scope lock admissions take."""
    if principal.actor_kind is not ActorKind.ADMIN or origin.actor_kind != ActorKind.ADMIN.value:
        # A service credential keeps its service identity; it cannot claim to be a person.
        raise DomainError(Code.FORBIDDEN_SCOPE, "Only an authenticated admin may extend a review budget.")
    validate_extension_shape(request)
    project = principal.project_id
    fields_hash = request_hash({"run_id": run_id, **asdict(request)})
    for _ in range(2):  # a concurrent twin may win the key's insert; the second pass reads it
        try:
            async with db.transaction() as uow:
                return await _grant(uow.conn, project, run_id, request, fields_hash, origin, request_id)
        except IntegrityError:
            continue
    raise DomainError(Code.CONFLICT, "A concurrent grant with this idempotency key is in flight; retry.")


async def _grant(
    conn: AsyncConnection,
    project: str,
    run_id: str,
    request: ExtensionInput,
    fields_hash: str,
    origin: Origin,
    request_id: str,
) -> ExtensionReceipt:
    seen = await store.grant_for_key(conn, project, request.idempotency_key)
    if seen is not None:
        if seen.request_hash != fields_hash:
            raise DomainError(
                Code.IDEMPOTENCY_CONFLICT,
                "This idempotency key was already used for a different grant; use a new key.",
            )
        return seen.receipt  # an exact retry answers the original receipt
    run = await store.get_run(conn, project, run_id)
    if run is None:
        raise run_not_found(run_id)
    limit = await store.lock_scope(conn, project, run.scope_key, MAX_REVIEW_ROUNDS)
    # Re-read under the lock: the run's state and head may have moved since the first read.
    run = await store.get_run(conn, project, run_id)
    assert run is not None  # runs are never deleted
    check_grant(run, request, limit)
    receipt = grant_receipt(new_id("rcpt"), run, request, limit, origin, request_id, utcnow())
    await store.add_grant(conn, project, store.Grant(receipt, fields_hash))
    await store.set_round_limit(conn, project, run.scope_key, request.new_limit)
    return receipt
