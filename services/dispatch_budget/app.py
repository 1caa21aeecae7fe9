"""dispatch_budget use cases: one function per RPC, one transaction each."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from dataclasses import replace as replace_state
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import orjson
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.evidence import (
    ENVELOPE_VERSION,
    EPHEMERAL_TYPES,
    EVENT_TYPES,
    FAMILIES,
    SCHEMA_VERSION,
    EvidenceStatus,
    evidence_rejected,
    evidence_status,
    sanitize_payload,
)
from reviewloop.ids import new_id
from reviewloop.storage import Database, utcnow
from reviewloop.storage.schema import insert_ignore
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget import store
from dispatch_budget.classifier import ClassifierGate, GateOutcome
from dispatch_budget.domain.autosend import utc_day, validate_consume
from dispatch_budget.domain.budget import (
    FULL_SHA,
    MAX_REVIEW_ROUNDS,
    VERDICTS,
    AttemptKind,
    ExtensionInput,
    NoVerdictReason,
    ReviewRoundBudget,
    RunStatus,
    Trigger,
    check_admission,
    check_extension_limits,
    scope_key,
    validate_extension_shape,
)
from dispatch_budget.domain.gate import (
    Decision,
    SessionState,
    after_turn,
    build_digest,
    fallback,
    not_due_reason,
    reset_counters,
)
from dispatch_budget.domain.gate import counts as gate_counts
from dispatch_budget.domain.selection import (
    ReviewMode,
    ReviewSelection,
    RunnerSpec,
    project_default_mode,
    resolve_review_mode,
    serialize_request_review,
    validate_runner,
    validate_selection,
    validate_sequence,
)

MAX_JOURNAL_BATCH = 500


# --- daily auto-send caps ---


@dataclass(frozen=True)
class AutoSend:
    allowed: bool
    used_today: int
    cap_per_day: int


class _OverCap(Exception):
    """Rolls back the spend row of a held send."""


async def consume_auto_send(
    db: Database, principal: Principal, *, category_id: str, review_id: str, cap_per_day: int
) -> AutoSend:
    """Spend one unit of the category's cap for today (UTC), atomically and once per review.
    Over the cap the answer is ``allowed = False`` and nothing is spent: the caller holds the send."""
    validate_consume(category_id, review_id, cap_per_day)
    project = principal.project_id
    try:
        async with db.transaction() as uow:
            conn = uow.conn
            now = utcnow()
            day = utc_day(now)
            spent = await conn.execute(
                insert_ignore(conn, store.auto_send_spends).values(
                    project_id=project, review_id=review_id, category_id=category_id, day=day, spent_at=now
                )
            )
            if spent.rowcount != 1:  # a retry: report the day it was spent on, spend nothing
                prior = (
                    await conn.execute(
                        select(store.auto_send_spends).where(
                            store.auto_send_spends.c.project_id == project,
                            store.auto_send_spends.c.review_id == review_id,
                        )
                    )
                ).one()
                used = await _used(conn, project, prior.category_id, prior.day)
                return AutoSend(True, used, cap_per_day)
            await conn.execute(
                insert_ignore(conn, store.auto_send_days).values(
                    project_id=project, category_id=category_id, day=day, used=0
                )
            )
            days = store.auto_send_days.c
            # The conditional increment is the atomic check: its row count decides.
            bumped = await conn.execute(
                update(store.auto_send_days)
                .where(
                    days.project_id == project,
                    days.category_id == category_id,
                    days.day == day,
                    days.used < cap_per_day,
                )
                .values(used=days.used + 1)
            )
            if bumped.rowcount != 1:
                raise _OverCap()
            return AutoSend(True, await _used(conn, project, category_id, day), cap_per_day)
    except _OverCap:
        async with db.engine.connect() as conn:
            used = await _used(conn, project, category_id, utc_day(utcnow()))
        return AutoSend(False, used, cap_per_day)


async def _used(conn: AsyncConnection, project: str, category_id: str, day: Any) -> int:
    days = store.auto_send_days.c
    value = (
        await conn.execute(
            select(days.used).where(
                days.project_id == project, days.category_id == category_id, days.day == day
            )
        )
    ).scalar()
    return int(value or 0)


# --- runs, admissions, settlements, extensions (spec 003) ---


@dataclass(frozen=True)
class RunModes:
    """The run's stored rungs of resolveReviewMode: Run.reviewMode, Run.prWork.review.options.mode
    and the retained Run.repeatReviewContext.mode."""

    review: ReviewMode | None = None
    pr_work: ReviewMode | None = None
    repeat_context: ReviewMode | None = None

    @classmethod
    def of(cls, row: Any) -> RunModes:
        def mode(value: str | None) -> ReviewMode | None:
            return ReviewMode(value) if value else None

        return cls(mode(row.review_mode), mode(row.pr_work_review_mode), mode(row.repeat_review_context_mode))

    def merged(self, update: RunModes) -> RunModes:
        """``update``'s set rungs over these."""
        return RunModes(
            update.review or self.review,
            update.pr_work or self.pr_work,
            update.repeat_context or self.repeat_context,
        )

    def columns(self) -> dict[str, str | None]:
        return {
            "review_mode": self.review.value if self.review else None,
            "pr_work_review_mode": self.pr_work.value if self.pr_work else None,
            "repeat_review_context_mode": self.repeat_context.value if self.repeat_context else None,
        }


@dataclass(frozen=True)
class Run:
    run_id: str
    repository: str
    pr_number: int
    head_sha: str
    status: RunStatus
    scope_key: str
    modes: RunModes = field(default_factory=RunModes)


@dataclass(frozen=True)
class Receipt:
    receipt_id: str
    run_id: str
    scope_key: str
    attempt_key: str
    kind: AttemptKind
    trigger: Trigger
    head_sha: str
    selection: dict[str, str]
    admitted_at: datetime
    round: int
    outcome: str | None
    reason: str | None
    verdict: str | None
    settled_at: datetime | None


@dataclass(frozen=True)
class Budget:
    scope_key: str
    budget: ReviewRoundBudget
    extension: dict[str, Any] | None = None
    # The latest automatic launch the no-verdict cap stopped, as the gate recorded it.
    last_launch_refusal: dict[str, Any] | None = None


@dataclass(frozen=True)
class Admission:
    receipt: Receipt
    reattached: bool
    budget: Budget


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands timestamps back naive; every one we store is UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _receipt(row: Any) -> Receipt:
    return Receipt(
        receipt_id=row.receipt_id,
        run_id=row.run_id,
        scope_key=row.scope_key,
        attempt_key=row.attempt_key,
        kind=AttemptKind(row.kind),
        trigger=Trigger(row.trigger),
        head_sha=row.head_sha,
        selection=dict(row.selection),
        admitted_at=_utc(row.admitted_at) or row.admitted_at,
        round=row.round,
        outcome=row.outcome,
        reason=row.reason,
        verdict=row.verdict,
        settled_at=_utc(row.settled_at),
    )


def _run_not_found(run_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No run {run_id} is visible to this key; record it first.")


async def record_run(
    db: Database,
    principal: Principal,
    *,
    run_id: str,
    repository: str,
    pr_number: int,
    head_sha: str,
    status: RunStatus | None,
    modes: RunModes | None = None,
) -> Run:
    """Store a run's snapshot. A run that gains a verified repository/PR identity joins the shared PR
    scope, bringing its admissions and grants; the PR scope's limit is the larger of the two. Unset
    review-mode rungs keep what the run had."""
    if not run_id or len(run_id) > 80:
        raise invalid("/run_id", "a run id of 1 to 80 characters is required")
    if pr_number < 0:
        raise invalid("/pr_number", "must be a positive PR number, or 0 before a PR exists")
    if pr_number and not repository:
        raise invalid("/repository", "a PR identity needs its repository")
    if head_sha and not FULL_SHA.match(head_sha):
        raise invalid("/head_sha", "must be a full commit SHA (40 or 64 lowercase hex)")
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        prior = await store.get_run(conn, project, run_id)
        stored = (RunModes.of(prior) if prior is not None else RunModes()).merged(modes or RunModes())
        if prior is not None:
            if (
                prior.pr_number
                and pr_number
                and (prior.pr_number, prior.repository) != (pr_number, repository)
            ):
                raise DomainError(Code.CONFLICT, f"Run {run_id} is already bound to {prior.scope_key}.")
            repository = repository or prior.repository
            pr_number = pr_number or prior.pr_number
            head_sha = head_sha or prior.head_sha
            if status is None:
                status = RunStatus(prior.status)
            elif (
                RunStatus(prior.status) in (RunStatus.PUBLISHED, RunStatus.ARCHIVED)
                and status is RunStatus.ACTIVE
            ):
                raise DomainError(
                    Code.WRONG_STATE, f"Run {run_id} is {prior.status}; it cannot become active."
                )
        key = scope_key(run_id, repository, pr_number)
        values = {
            "repository": repository,
            "pr_number": pr_number,
            "head_sha": head_sha,
            "status": (status or RunStatus.ACTIVE).value,
            "scope_key": key,
            "updated_at": utcnow(),
            **stored.columns(),
        }
        if prior is None:
            await conn.execute(store.runs.insert().values(project_id=project, run_id=run_id, **values))
        else:
            await conn.execute(
                update(store.runs)
                .where(store.runs.c.project_id == project, store.runs.c.run_id == run_id)
                .values(**values)
            )
            if prior.scope_key != key:
                await _merge_scope(conn, project, prior.scope_key, key)
        return Run(run_id, repository, pr_number, head_sha, status or RunStatus.ACTIVE, key, stored)


async def _merge_scope(conn: AsyncConnection, project: str, old: str, new: str) -> None:
    old_limit = await store.lock_scope(conn, project, old, MAX_REVIEW_ROUNDS)
    new_limit = await store.lock_scope(conn, project, new, MAX_REVIEW_ROUNDS)
    for table in (store.admissions, store.extensions):
        await conn.execute(
            update(table).where(table.c.project_id == project, table.c.scope_key == old).values(scope_key=new)
        )
    if old_limit > new_limit:
        await conn.execute(
            update(store.round_scopes)
            .where(store.round_scopes.c.project_id == project, store.round_scopes.c.scope_key == new)
            .values(round_limit=old_limit)
        )


async def _budget(conn: AsyncConnection, project: str, key: str, limit: int) -> Budget:
    total, no_verdict = await store.scope_counts(conn, project, key)
    return Budget(
        key,
        ReviewRoundBudget(total, no_verdict, limit),
        await store.latest_extension(conn, project, key),
        await store.latest_launch_refusal(conn, project, key),
    )


async def admit_review_round(
    db: Database,
    principal: Principal,
    *,
    run_id: str,
    attempt_key: str,
    kind: AttemptKind,
    trigger: Trigger,
    head_sha: str,
    selection: dict[str, str],
    receipt_id: str = "",
) -> Admission:
    """Persist an admission receipt before the runner starts, or refuse before anything is consumed.
    A reattach (same attempt key, or a copied history's receipt id) reuses its receipt and settlement."""
    if not receipt_id and not attempt_key:
        raise invalid("/attempt_key", "name the attempt (run, engine generation, sequence row)")
    if len(attempt_key) > 200:
        raise invalid("/attempt_key", "at most 200 characters")
    if head_sha and not FULL_SHA.match(head_sha):
        raise invalid("/head_sha", "must be the full reviewed head SHA")
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        run = await store.get_run(conn, project, run_id)
        if run is None:
            raise _run_not_found(run_id)
        limit = await store.lock_scope(conn, project, run.scope_key, MAX_REVIEW_ROUNDS)
        adm = store.admissions.c
        existing = (
            await conn.execute(
                select(store.admissions).where(
                    adm.project_id == project,
                    adm.receipt_id == receipt_id if receipt_id else adm.attempt_key == attempt_key,
                )
            )
        ).first()
        if existing is not None:
            if existing.scope_key != run.scope_key:
                raise DomainError(
                    Code.NOT_FOUND, f"Receipt {existing.receipt_id} does not belong to run {run_id}'s scope."
                )
            return Admission(_receipt(existing), True, await _budget(conn, project, run.scope_key, limit))
        if receipt_id:
            raise DomainError(Code.NOT_FOUND, f"No admission receipt {receipt_id} is visible to this key.")
        if RunStatus(run.status) in (RunStatus.PUBLISHED, RunStatus.ARCHIVED):
            raise DomainError(Code.WRONG_STATE, f"Run {run_id} is {run.status}; it admits no reviewer.")
        if selection and not selection.get("mode"):
            # Admission uses resolveReviewMode's precedence: the run's stored rungs, the project's
            # configured default, then COLD.
            modes = RunModes.of(run)
            configured = project_default_mode(await store.review_config(conn, project))
            mode, _ = resolve_review_mode(None, modes.review, modes.pr_work, modes.repeat_context, configured)
            selection = {**selection, "mode": mode.value}
        # The check needs only the counts; the grant and the last refusal are for the answer below.
        budget = ReviewRoundBudget(*await store.scope_counts(conn, project, run.scope_key), limit)
        refusal = await _refusal(conn, run, attempt_key, trigger, budget)
        if refusal is None:
            row = {
                "receipt_id": new_id("rcpt"),
                "project_id": project,
                "scope_key": run.scope_key,
                "run_id": run_id,
                "attempt_key": attempt_key,
                "kind": kind.value,
                "trigger": trigger.value,
                "head_sha": head_sha or run.head_sha,
                "selection": selection,
                "admitted_at": utcnow(),
                "round": budget.used + 1,
                "outcome": None,
                "reason": None,
                "verdict": None,
                "settled_at": None,
            }
            await conn.execute(store.admissions.insert().values(**row))
            after = await _budget(conn, project, run.scope_key, limit)
            return Admission(_receipt(SimpleNamespace(**row)), False, after)
    raise refusal  # recorded, and committed with the transaction above


async def _refusal(
    conn: AsyncConnection, run: Any, attempt_key: str, trigger: Trigger, budget: ReviewRoundBudget
) -> DomainError | None:
    """None when the launch may go. A spent budget raises before anything is written; an automatic
    launch stopped at the no-verdict cap is recorded by the gate (spec 003) and returned to raise."""
    try:
        check_admission(budget, trigger, await store.last_failures(conn, run.project_id, run.scope_key))
    except DomainError as error:
        if budget.exhausted:
            raise
        await conn.execute(
            store.launch_refusals.insert().values(
                project_id=run.project_id,
                scope_key=run.scope_key,
                run_id=run.run_id,
                attempt_key=attempt_key,
                trigger=trigger.value,
                no_verdict=budget.no_verdict,
                reason=error.detail,
                refused_at=utcnow(),
            )
        )
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
) -> tuple[Receipt, Budget]:
    """Settle an attempt once. Counted: a pass or issues verdict for the reviewed head (records no
    settlement). No-verdict: one of the spec's ends, recorded with reason and time; it spends no round.
    A verdict arriving after a no-verdict settlement clears it, and the attempt counts."""
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        adm = store.admissions.c
        row = (
            await conn.execute(
                select(store.admissions).where(adm.project_id == project, adm.receipt_id == receipt_id)
            )
        ).first()
        if row is None:
            raise DomainError(Code.NOT_FOUND, f"No admission receipt {receipt_id} is visible to this key.")
        limit = await store.lock_scope(conn, project, row.scope_key, MAX_REVIEW_ROUNDS)
        if journal_run_id:
            outcome, reason, verdict = await _from_journal(conn, project, journal_run_id, row.head_sha)
        else:
            outcome, reason = _settlement(row.head_sha, verdict, reviewed_head, no_verdict_reason)
        values: dict[str, Any]
        if row.outcome is None:
            values = {
                "outcome": outcome,
                "reason": reason,
                "verdict": verdict or None,
                "settled_at": utcnow(),
            }
        elif row.outcome == "no_verdict" and outcome == "counted":
            values = {
                "outcome": "counted",
                "reason": None,
                "verdict": verdict or None,
                "settled_at": utcnow(),
            }
        elif row.outcome == outcome:
            values = {}  # a retried settlement: the first one stands
        else:
            raise DomainError(
                Code.CONFLICT,
                f"Receipt {receipt_id} already settled as {row.outcome}; an attempt settles once.",
                state=row.outcome,
            )
        if values:
            await conn.execute(
                update(store.admissions)
                .where(
                    adm.receipt_id == receipt_id,
                    adm.outcome.is_(None) if row.outcome is None else adm.outcome == row.outcome,
                )
                .values(**values)
            )
        fresh = (await conn.execute(select(store.admissions).where(adm.receipt_id == receipt_id))).one()
        return _receipt(fresh), await _budget(conn, project, row.scope_key, limit)


def _settlement(head: str, verdict: str, reviewed_head: str, reason: str) -> tuple[str, str | None]:
    if verdict:
        if verdict not in VERDICTS:
            raise invalid("/verdict", "must be pass or issues")
        if reviewed_head != head:
            raise invalid("/reviewed_head", f"the verdict must be for the admitted head {head}")
        return "counted", None
    try:
        return "no_verdict", NoVerdictReason(reason).value
    except ValueError:
        raise invalid(
            "/no_verdict_reason",
            f"give a verdict, or one of {', '.join(r.value for r in NoVerdictReason)}",
        ) from None


async def _from_journal(
    conn: AsyncConnection, project: str, journal_run_id: str, head: str
) -> tuple[str, str | None, str]:
    """(outcome, no-verdict reason, verdict) from the attempt journal's final turn_completed:
    accepted with a verdict for the reviewed head counts; unknown fails closed (counts, with no
    verdict); rejected, absent or no usable verdict are no-verdict ends."""
    final = await _final_turn(conn, project, journal_run_id)
    if final is None:
        return "no_verdict", NoVerdictReason.MISSING_RESULT.value, ""
    payload = final.get("payload", {})
    status = evidence_status(payload)
    verdict = payload.get("verdict")
    verdict = verdict if verdict in VERDICTS else ""
    if status is EvidenceStatus.UNKNOWN:
        return "counted", None, verdict
    if status is EvidenceStatus.ACCEPTED and verdict and payload.get("reviewed_head") == head:
        return "counted", None, verdict
    if status is EvidenceStatus.ABSENT:
        return "no_verdict", NoVerdictReason.MISSING_RESULT.value, ""
    return "no_verdict", NoVerdictReason.UNUSABLE_RESULT.value, ""


async def get_round_budget(db: Database, principal: Principal, run_id: str) -> Budget:
    async with db.engine.connect() as conn:
        run = await store.get_run(conn, principal.project_id, run_id)
        if run is None:
            raise _run_not_found(run_id)
        limit = (
            await conn.execute(
                select(store.round_scopes.c.round_limit).where(
                    store.round_scopes.c.project_id == principal.project_id,
                    store.round_scopes.c.scope_key == run.scope_key,
                )
            )
        ).scalar()
        return await _budget(conn, principal.project_id, run.scope_key, int(limit or MAX_REVIEW_ROUNDS))


@dataclass(frozen=True)
class Origin:
    """The authenticated request origin, set by the gateway from the key, never from the body."""

    actor_kind: str
    actor_id: str
    key_id: str = ""
    remote_addr: str = ""
    user_agent: str = ""


def _hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def extend_review_budget(
    db: Database,
    principal: Principal,
    *,
    run_id: str,
    request: ExtensionInput,
    origin: Origin,
    request_id: str = "",
) -> dict[str, Any]:
    """run.extendReviewBudget: an admin's scoped, compare-and-set grant of one to five more rounds.
    Every check runs before any write; the receipt is persisted in the same transaction that raises
    the limit, under the scope lock admissions take."""
    if principal.actor_kind is not ActorKind.ADMIN or origin.actor_kind != ActorKind.ADMIN.value:
        # A service credential keeps its service identity; it cannot claim to be a person.
        raise DomainError(Code.FORBIDDEN_ACTOR, "Only an authenticated admin may extend a review budget.")
    validate_extension_shape(request)
    project = principal.project_id
    request_hash = _hash({"run_id": run_id, **asdict(request)})
    for _ in range(2):  # a concurrent twin may win the key's insert; the second pass reads it
        try:
            async with db.transaction() as uow:
                return await _grant(uow.conn, project, run_id, request, request_hash, origin, request_id)
        except IntegrityError:
            continue
    raise DomainError(Code.CONFLICT, "A concurrent grant with this idempotency key is in flight; retry.")


async def _grant(
    conn: AsyncConnection,
    project: str,
    run_id: str,
    request: ExtensionInput,
    request_hash: str,
    origin: Origin,
    request_id: str,
) -> dict[str, Any]:
    ext = store.extensions.c
    seen = (
        await conn.execute(
            select(store.extensions).where(
                ext.project_id == project, ext.idempotency_key == request.idempotency_key
            )
        )
    ).first()
    if seen is not None:
        if seen.request_hash != request_hash:
            raise DomainError(
                Code.IDEMPOTENCY_CONFLICT,
                "This idempotency key was already used for a different grant; use a new key.",
            )
        return dict(seen.receipt)  # an exact retry answers the original receipt
    run = await store.get_run(conn, project, run_id)
    if run is None:
        raise _run_not_found(run_id)
    limit = await store.lock_scope(conn, project, run.scope_key, MAX_REVIEW_ROUNDS)
    # Re-read under the lock: the run's state and head may have moved since the first read.
    run = await store.get_run(conn, project, run_id)
    if RunStatus(run.status) in (RunStatus.PUBLISHED, RunStatus.ARCHIVED):
        raise DomainError(
            Code.WRONG_STATE,
            f"Run {run_id} is {run.status}; only an unpublished, unarchived run is extended.",
        )
    if not run.head_sha:
        raise DomainError(Code.STALE, f"Run {run_id}'s live head is unknown; record its head first.")
    if run.head_sha != request.head_sha:
        raise DomainError(
            Code.STALE,
            f"head_sha {request.head_sha} is not run {run_id}'s current head; re-read the run and retry.",
            hints=(("head_sha", run.head_sha),),
        )
    check_extension_limits(request, limit)
    now = utcnow()
    receipt = {
        "receipt_id": new_id("rcpt"),
        "idempotency_key": request.idempotency_key,
        "request_id": request_id,
        "run_id": run_id,
        "repository": run.repository,
        "pr_number": run.pr_number,
        "scope_key": run.scope_key,
        "approved_head": run.head_sha,
        "prior_limit": limit,
        "new_limit": request.new_limit,
        "scope_brief": request.scope_brief.strip(),
        "origin": asdict(origin),
        "granted_at": now.isoformat(),
    }
    await conn.execute(
        store.extensions.insert().values(
            receipt_id=receipt["receipt_id"],
            project_id=project,
            idempotency_key=request.idempotency_key,
            request_hash=request_hash,
            scope_key=run.scope_key,
            receipt=receipt,
            granted_at=now,
        )
    )
    await conn.execute(
        update(store.round_scopes)
        .where(store.round_scopes.c.project_id == project, store.round_scopes.c.scope_key == run.scope_key)
        .values(round_limit=request.new_limit)
    )
    return receipt


# --- attempt journals (spec 002) ---


@dataclass(frozen=True)
class Appended:
    appended: int
    skipped_ephemeral: int
    last_offset: int


def _journal_record(raw: Any, index: int) -> dict[str, Any] | None:
    """One event as a journal record; None for the live-only item_delta."""
    if not isinstance(raw, dict):
        raise invalid(f"/events/{index}", "each event is a JSON object")
    kind = raw.get("type")
    if kind not in EVENT_TYPES:
        raise invalid(f"/events/{index}/type", f"one of {', '.join(sorted(EVENT_TYPES))}")
    if kind in EPHEMERAL_TYPES:
        return None
    family = raw.get("family", "loop")
    if family not in FAMILIES:
        raise invalid(f"/events/{index}/family", "loop or meta")
    payload = raw.get("payload", {})
    if not isinstance(payload, dict):
        raise invalid(f"/events/{index}/payload", "must be a JSON object")
    ts = raw.get("ts")
    return {
        "v": ENVELOPE_VERSION,
        "session_id": str(raw.get("session_id", ""))[:200],
        "turn_id": str(raw.get("turn_id", ""))[:200],
        "ts": ts
        if isinstance(ts, int) and not isinstance(ts, bool)
        else int(utcnow().timestamp() * 1_000_000),
        "family": family,
        "type": kind,
        "tier": "durable",
        "payload": sanitize_payload(payload),
        "schema_version": SCHEMA_VERSION,
    }


async def append_journal_events(
    db: Database, principal: Principal, run_id: str, events: list[Any]
) -> Appended:
    """Append a batch to the run's journal, all or nothing; each record's ``id`` is its offset."""
    if not run_id or len(run_id) > 80:
        raise invalid("/run_id", "a run id of 1 to 80 characters is required")
    if len(events) > MAX_JOURNAL_BATCH:
        raise invalid("/events", f"at most {MAX_JOURNAL_BATCH} events per call")
    records = [_journal_record(raw, i) for i, raw in enumerate(events)]
    durable = [r for r in records if r is not None]
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        heads = store.journal_heads.c
        await conn.execute(
            insert_ignore(conn, store.journal_heads).values(project_id=project, run_id=run_id, last_offset=0)
        )
        last = (
            await conn.execute(
                select(heads.last_offset)
                .where(heads.project_id == project, heads.run_id == run_id)
                .with_for_update()
            )
        ).scalar_one()
        rows = []
        for offset, record in enumerate(durable, start=int(last) + 1):
            record["id"] = offset
            rows.append(
                {
                    "project_id": project,
                    "run_id": run_id,
                    "offset": offset,
                    "type": record["type"],
                    "record": orjson.dumps(record, option=orjson.OPT_SORT_KEYS).decode(),
                }
            )
        if rows:
            await conn.execute(store.journal_events.insert(), rows)
            await conn.execute(
                update(store.journal_heads)
                .where(heads.project_id == project, heads.run_id == run_id)
                .values(last_offset=int(last) + len(rows))
            )
        return Appended(len(rows), len(records) - len(rows), int(last) + len(rows))


async def read_journal(
    db: Database, principal: Principal, run_id: str, after: int = 0, limit: int = 1000
) -> list[dict[str, Any]]:
    j = store.journal_events.c
    async with db.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(j.record)
                .where(j.project_id == principal.project_id, j.run_id == run_id, j.offset > after)
                .order_by(j.offset)
                .limit(limit)
            )
        ).all()
    return [orjson.loads(r.record) for r in rows]


async def _final_turn(conn: AsyncConnection, project: str, run_id: str) -> dict[str, Any] | None:
    j = store.journal_events.c
    rows = (
        await conn.execute(
            select(j.record)
            .where(j.project_id == project, j.run_id == run_id, j.type == "turn_completed")
            .order_by(j.offset.desc())
        )
    ).all()
    for row in rows:
        record: dict[str, Any] = orjson.loads(row.record)
        if record.get("payload", {}).get("final") is True:
            return record
    return None


@dataclass(frozen=True)
class Evidence:
    status: EvidenceStatus
    offset: int = 0
    schema_version: str = ""
    rejected: dict[str, Any] | None = field(default=None)


async def get_evidence_status(db: Database, principal: Principal, run_id: str) -> Evidence:
    """The evidence of the run's closing turn_completed; ``unknown`` while there is none."""
    async with db.engine.connect() as conn:
        final = await _final_turn(conn, principal.project_id, run_id)
    if final is None:
        return Evidence(EvidenceStatus.UNKNOWN)
    payload = final.get("payload", {})
    return Evidence(
        evidence_status(payload),
        int(final["id"]),
        str(final.get("schema_version", "")),
        evidence_rejected(payload),
    )


# --- selection catalog, sequences, mode resolution, lineage (spec 003) ---


async def register_runner(db: Database, principal: Principal, spec: RunnerSpec) -> RunnerSpec:
    """Admins register (or replace) a runner with the models and efforts it supports."""
    if principal.actor_kind is not ActorKind.ADMIN:
        raise DomainError(Code.FORBIDDEN_ACTOR, "Only an admin registers runners in the capability catalog.")
    validate_runner(spec)
    async with db.transaction() as uow:
        conn = uow.conn
        r = store.runners.c
        await conn.execute(
            store.runners.delete().where(r.project_id == principal.project_id, r.name == spec.name)
        )
        await conn.execute(
            store.runners.insert().values(
                project_id=principal.project_id, name=spec.name, spec=spec.to_json()
            )
        )
    return spec


async def set_review_config(
    db: Database, principal: Principal, config: dict[str, Any]
) -> tuple[dict[str, Any], ReviewMode | None]:
    """An admin stores the project review configuration; it is validated first (removed keys are
    refused with a conversion hint), so a stored configuration always resolves."""
    if principal.actor_kind is not ActorKind.ADMIN:
        raise DomainError(Code.FORBIDDEN_ACTOR, "Only an admin sets the project review configuration.")
    mode = project_default_mode(config)
    async with db.transaction() as uow:
        c = store.review_configs.c
        await uow.conn.execute(store.review_configs.delete().where(c.project_id == principal.project_id))
        await uow.conn.execute(
            store.review_configs.insert().values(
                project_id=principal.project_id, config=config, updated_at=utcnow()
            )
        )
    return config, mode


async def get_review_config(db: Database, principal: Principal) -> tuple[dict[str, Any], ReviewMode | None]:
    async with db.single_statement.connect() as conn:
        config = await store.review_config(conn, principal.project_id)
    return config, project_default_mode(config)


async def _catalog(conn: AsyncConnection, project: str) -> dict[str, RunnerSpec]:
    rows = (
        await conn.execute(select(store.runners.c.spec).where(store.runners.c.project_id == project))
    ).all()
    return {row.spec["name"]: RunnerSpec.from_json(row.spec) for row in rows}


async def list_runners(db: Database, principal: Principal) -> list[RunnerSpec]:
    async with db.engine.connect() as conn:
        catalog = await _catalog(conn, principal.project_id)
    return [catalog[name] for name in sorted(catalog)]


async def validate_review_sequence(
    db: Database, principal: Principal, rows: Any
) -> tuple[list[ReviewSelection], dict[str, Any]]:
    """The rows normalized against the catalog, and the shared request-review serialization."""
    async with db.engine.connect() as conn:
        catalog = await _catalog(conn, principal.project_id)
    selections = validate_sequence(rows, catalog)
    return selections, serialize_request_review(selections)


async def resolve_mode(
    db: Database,
    principal: Principal,
    *,
    run_id: str,
    explicit: ReviewMode | None,
    given: RunModes,
    project_default: ReviewMode | None,
    project_config: dict[str, Any] | None,
) -> tuple[ReviewMode, str]:
    """resolveReviewMode; with a ``run_id`` the stored run supplies the rungs the caller left unset,
    and without a configuration in the request the project's stored one supplies the default."""
    modes = given
    async with db.engine.connect() as conn:
        if run_id:
            run = await store.get_run(conn, principal.project_id, run_id)
            if run is None:
                raise _run_not_found(run_id)
            modes = RunModes.of(run).merged(given)
        if project_config is None:
            project_config = await store.review_config(conn, principal.project_id)
    configured = project_default_mode(project_config)
    return resolve_review_mode(
        explicit, modes.review, modes.pr_work, modes.repeat_context, project_default or configured
    )


@dataclass(frozen=True)
class Binding:
    review_id: str
    session_id: str
    mode: ReviewMode
    range_base: str
    range_head: str
    fresh_session: bool
    selection: ReviewSelection
    busy: bool


def _refuse_warm(why: str) -> DomainError:
    return DomainError(
        Code.WRONG_STATE,
        f"WARM review refused: {why}. A WARM review never silently falls back to COLD; request COLD "
        "explicitly for a fresh session over the full range.",
        state="warm_unavailable",
    )


async def bind_review_session(
    db: Database,
    principal: Principal,
    *,
    repository: str,
    pr_number: int,
    selection: Any,
    base_sha: str,
    head_sha: str,
    review_id: str = "",
    new_review_id: str = "",
) -> Binding:
    """COLD: a fresh session over the full base..head. WARM: the lineage's verified previous session
    over lastReviewedHead..head, or a visible refusal (missing, foreign, busy, incompatible)."""
    if not repository or pr_number < 1:
        raise invalid("/repository", "a review session binds to a repository/PR")
    for pointer, sha in (("/base_sha", base_sha), ("/head_sha", head_sha)):
        if not FULL_SHA.match(sha):
            raise invalid(pointer, "must be a full commit SHA")
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        chosen = validate_selection(selection, await _catalog(conn, project))
        s = store.review_sessions.c
        if chosen.mode is ReviewMode.COLD:
            lineage = new_review_id or new_id("rvl")
            if len(lineage) > 80:
                raise invalid("/new_review_id", "at most 80 characters")
            binding = Binding(lineage, new_id("rvs"), chosen.mode, base_sha, head_sha, True, chosen, True)
            await conn.execute(
                store.review_sessions.insert().values(
                    session_id=binding.session_id,
                    project_id=project,
                    repository=repository,
                    pr_number=pr_number,
                    review_id=lineage,
                    runner=chosen.runner,
                    model=chosen.model,
                    effort=chosen.effort,
                    mode=chosen.mode.value,
                    base_sha=base_sha,
                    range_base=base_sha,
                    range_head=head_sha,
                    last_reviewed_head=None,
                    busy=True,
                    created_at=utcnow(),
                )
            )
            return binding
        if not review_id:
            raise _refuse_warm("no review lineage was named (review_id) to continue")
        previous = (
            await conn.execute(
                select(store.review_sessions)
                .where(s.project_id == project, s.review_id == review_id)
                .order_by(s.created_at.desc())
                .limit(1)
                .with_for_update()
            )
        ).first()
        if previous is None:
            raise _refuse_warm(f"lineage {review_id} has no previous review session")
        if (previous.repository, previous.pr_number) != (repository, pr_number):
            raise _refuse_warm(f"lineage {review_id} belongs to another repository/PR")
        if previous.busy:
            raise _refuse_warm(f"session {previous.session_id} is busy with another review; wait for it")
        if not previous.last_reviewed_head:
            raise _refuse_warm(f"session {previous.session_id} has no verified reviewed head")
        if previous.runner != chosen.runner:
            raise _refuse_warm(f"lineage {review_id} runs on {previous.runner}, not {chosen.runner}")
        catalog = await _catalog(conn, project)
        if (previous.model, previous.effort) != (chosen.model, chosen.effort) and not catalog[
            chosen.runner
        ].supports_model_change:
            raise _refuse_warm(f"{chosen.runner}'s session adapter cannot change model or effort mid-session")
        await conn.execute(
            update(store.review_sessions)
            .where(s.session_id == previous.session_id)
            .values(
                busy=True,
                model=chosen.model,
                effort=chosen.effort,
                range_base=previous.last_reviewed_head,
                range_head=head_sha,
            )
        )
        return Binding(
            review_id,
            previous.session_id,
            chosen.mode,
            previous.last_reviewed_head,
            head_sha,
            False,
            chosen,
            True,
        )


async def complete_review_session(
    db: Database, principal: Principal, session_id: str, reviewed_head: str
) -> Binding:
    """The session reviewed its range: record the head a later WARM review continues from."""
    if not FULL_SHA.match(reviewed_head):
        raise invalid("/reviewed_head", "must be a full commit SHA")
    async with db.transaction() as uow:
        s = store.review_sessions.c
        row = (
            await uow.conn.execute(
                select(store.review_sessions).where(
                    s.project_id == principal.project_id, s.session_id == session_id
                )
            )
        ).first()
        if row is None:
            raise DomainError(Code.NOT_FOUND, f"No review session {session_id} is visible to this key.")
        if reviewed_head != row.range_head:
            raise invalid("/reviewed_head", f"the session was bound to review up to {row.range_head}")
        await uow.conn.execute(
            update(store.review_sessions)
            .where(s.session_id == session_id)
            .values(busy=False, last_reviewed_head=reviewed_head)
        )
        selection = ReviewSelection(row.runner, row.model, row.effort, ReviewMode(row.mode))
        return Binding(
            row.review_id,
            session_id,
            ReviewMode(row.mode),
            row.range_base,
            row.range_head,
            False,
            selection,
            False,
        )


# --- the review-run gate (spec 001) ---


@dataclass(frozen=True)
class TurnResult:
    counters: SessionState
    counted: bool
    decision: dict[str, Any] | None
    not_due_reason: str | None


def _session(row: Any) -> SessionState:
    return SessionState(
        turns=row.turns,
        tools=row.tools,
        turn_index=row.turn_index,
        reviews=row.reviews,
        in_flight=row.in_flight,
        enabled=row.enabled,
        last_review_at=_utc(row.last_review_at),
        last_gate_call_at=_utc(row.last_gate_call_at),
    )


async def _load_session(conn: AsyncConnection, project: str, session_id: str) -> SessionState:
    await conn.execute(
        insert_ignore(conn, store.agent_sessions).values(
            project_id=project,
            session_id=session_id,
            turns=0,
            tools=0,
            turn_index=0,
            reviews=0,
            in_flight=False,
            enabled=True,
        )
    )
    a = store.agent_sessions.c
    row = (
        await conn.execute(
            select(store.agent_sessions)
            .where(a.project_id == project, a.session_id == session_id)
            .with_for_update()
        )
    ).one()
    return _session(row)


async def _save_session(conn: AsyncConnection, project: str, session_id: str, state: SessionState) -> None:
    a = store.agent_sessions.c
    await conn.execute(
        update(store.agent_sessions)
        .where(a.project_id == project, a.session_id == session_id)
        .values(**asdict(state))
    )


def _check_session_id(session_id: str) -> None:
    if not session_id or len(session_id) > 80:
        raise invalid("/session_id", "a session id of 1 to 80 characters is required")


async def record_turn(
    db: Database,
    gate: ClassifierGate,
    principal: Principal,
    *,
    session_id: str,
    origin: str,
    depth: int,
    status: str,
    tool_calls: int,
    digest: dict[str, Any],
) -> TurnResult:
    """Count one turn; when the counters are due, ask the gate and log the decision."""
    _check_session_id(session_id)
    if tool_calls < 0 or depth < 0:
        raise invalid("/tool_calls", "counts are never negative")
    project = principal.project_id
    async with db.transaction() as uow:
        state = await _load_session(uow.conn, project, session_id)
        if not gate_counts(origin, depth, status):
            return TurnResult(state, False, None, "not_counted")
        state = after_turn(state, tool_calls)
        claimed, why_not = await _claim(uow.conn, gate, project, session_id, state, review_now=False)
        if why_not is not None:
            return TurnResult(state, True, None, why_not)
    return await _decide(db, gate, project, session_id, claimed, digest, review_now=False)


async def _claim(
    conn: AsyncConnection,
    gate: ClassifierGate,
    project: str,
    session_id: str,
    state: SessionState,
    review_now: bool,
) -> tuple[SessionState, str | None]:
    """Save the counters; when a review may run, mark it in flight before the gate is asked, so
    two callers never both start one."""
    now = utcnow()
    why_not = not_due_reason(state, gate.config, now, review_now)
    if why_not is None:
        state = replace_state(state, in_flight=True)
    await _save_session(conn, project, session_id, state)
    return state, why_not


async def _decide(
    db: Database,
    gate: ClassifierGate,
    project: str,
    session_id: str,
    state: SessionState,
    digest: dict[str, Any],
    review_now: bool,
) -> TurnResult:
    # The classifier call runs between two transactions: no row lock is held across a network call.
    now = utcnow()
    if review_now:
        outcome = GateOutcome(Decision("review", "counters", "review now"), 0)
    elif (
        gate.active
        and state.last_gate_call_at is not None
        and now - state.last_gate_call_at < gate.config.gate_cooldown
    ):
        outcome = GateOutcome(fallback("gate cooldown"), 0)
    else:
        called = gate.active and not gate.breaker.open
        outcome = await gate.decide(
            build_digest(
                str(digest.get("last_human_message", "")),
                str(digest.get("last_assistant_message", "")),
                state.tools,
                [str(s) for s in digest.get("loaded_skills", [])],
                state.turn_index,
            )
        )
        if called:
            state = replace_state(state, last_gate_call_at=now)
    decision = outcome.decision
    record: dict[str, Any] = {
        "at": now.isoformat().replace("+00:00", "Z"),
        "session": session_id,
        "turn": state.turn_index,
        "decision": decision.decision,
        "source": decision.source,
        "reason": decision.reason,
        "choice": decision.choice,
        "confidence": decision.confidence,
        "probability": decision.probability,
        "toolCalls": state.tools,
        "latencyMs": outcome.latency_ms,
        "threshold": gate.config.confident_no,
    }
    record = {k: v for k, v in record.items() if v is not None}
    async with db.transaction() as uow:
        current = await _load_session(uow.conn, project, session_id)
        if decision.decision == "skip":
            current = reset_counters(replace_state(current, in_flight=False))
        else:
            current = replace_state(current, reviews=current.reviews + 1, last_review_at=now)
        current = replace_state(
            current, last_gate_call_at=state.last_gate_call_at or current.last_gate_call_at
        )
        await _save_session(uow.conn, project, session_id, current)
        await uow.conn.execute(
            store.gate_decisions.insert().values(
                project_id=project, session_id=session_id, record=record, at=now
            )
        )
    return TurnResult(current, True, record, None)


async def decide_review(
    db: Database,
    gate: ClassifierGate,
    principal: Principal,
    *,
    session_id: str,
    review_now: bool,
    digest: dict[str, Any],
) -> TurnResult:
    """Ask for a review outside the turn flow: ``review now`` bypasses enabled, the counters and the
    cooldown; the session budget and the single in-flight rule still apply."""
    _check_session_id(session_id)
    project = principal.project_id
    async with db.transaction() as uow:
        state = await _load_session(uow.conn, project, session_id)
        claimed, why_not = await _claim(uow.conn, gate, project, session_id, state, review_now)
        if why_not is not None:
            return TurnResult(state, False, None, why_not)
    return await _decide(db, gate, project, session_id, claimed, digest, review_now)


async def set_review_enabled(
    db: Database, principal: Principal, session_id: str, enabled: bool
) -> SessionState:
    """``review on|off`` for a session: off stops automatic reviews immediately."""
    _check_session_id(session_id)
    async with db.transaction() as uow:
        state = replace_state(
            await _load_session(uow.conn, principal.project_id, session_id), enabled=enabled
        )
        await _save_session(uow.conn, principal.project_id, session_id, state)
        return state


async def finish_review(db: Database, principal: Principal, session_id: str, succeeded: bool) -> SessionState:
    """The review ended: it is no longer in flight; a successful one resets the counters."""
    _check_session_id(session_id)
    async with db.transaction() as uow:
        state = await _load_session(uow.conn, principal.project_id, session_id)
        state = replace_state(state, in_flight=False)
        if succeeded:
            state = reset_counters(state)
        await _save_session(uow.conn, principal.project_id, session_id, state)
        return state


async def list_gate_decisions(
    db: Database, principal: Principal, *, session_id: str = "", cursor: str = "", limit: int = 100
) -> tuple[list[dict[str, Any]], str]:
    """The project's decision log, oldest first (the gates.jsonl records)."""
    if not 1 <= limit <= 1000:
        raise invalid("/limit", "between 1 and 1000")
    try:
        after = int(cursor) if cursor else 0
    except ValueError:
        raise invalid("/cursor", "pass next_cursor as given") from None
    g = store.gate_decisions.c
    query = select(g.id, g.record).where(g.project_id == principal.project_id, g.id > after)
    if session_id:
        query = query.where(g.session_id == session_id)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query.order_by(g.id).limit(limit + 1))).all()
    next_cursor = str(rows[limit - 1].id) if len(rows) > limit else ""
    return [dict(r.record) for r in rows[:limit]], next_cursor
