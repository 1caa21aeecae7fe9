"""Issue 14 follow-ups: a review in flight past ``timeoutMinutes`` is ended by the service's background
sweep alone (the session never calls again), its admitted attempt settles no-verdict ``timed_out`` and
its round is refunded; two replicas' sweeps end it once; an idle sweep records no span; a busy
binding from before leases gets a default lease from the migration instead of lapsing at once.
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from dispatch_budget import app, store
from dispatch_budget.__main__ import SPEC
from dispatch_budget.app import gate as gate_app
from dispatch_budget.bootstrap import Env, Settings, bootstrap
from dispatch_budget.domain.budget import AttemptKind, Trigger
from dispatch_budget.domain.gate import GateConfig
from dispatch_budget.domain.rounds import Outcome
from dispatch_budget.store.tables import review_sessions
from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
from opentelemetry.metrics import NoOpMeter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from reviewloop.errors import Code, DomainError
from reviewloop.storage import Database
from reviewloop.storage.engine import WRITE_OPTION
from reviewloop.storage.migrations import _config
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import select

from tests.dispatch_budget.test_selection import ADMIN, H1, H2, OpenDb, _bind, _catalog

AGENT = Principal("org_1", "prj_1", ActorKind.AGENT, "agt_composer")
REVIEWER = Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_rev")
HEAD = "d" * 40
DUE_AT_ONCE = GateConfig(turn_interval=1, cooldown=timedelta(0))


async def _env(open_db: OpenDb) -> Env:
    db = await open_db(SPEC)
    return bootstrap(db, Settings(gate=DUE_AT_ONCE, sweep_interval_s=0.01))


async def _turn(env: Env, session_id: str = "s1") -> app.TurnResult:
    return await app.record_turn(
        env.db,
        env.gate,
        AGENT,
        session_id,
        app.Turn(origin="", depth=0, status="completed", tool_calls=0),
        {},
    )


async def _in_flight_with_receipt(env: Env, session_id: str = "s1", name_session: bool = True) -> str:
    """A session's review in flight, its attempt admitted (naming the session); answers the receipt."""
    claimed = await _turn(env, session_id)
    assert claimed.decision is not None and claimed.decision.decision == "review"
    assert claimed.counters.in_flight
    run = f"{session_id}-run"
    await app.record_run(
        env.db, REVIEWER, app.RunSnapshot(run_id=run, repository="", pr_number=0, head_sha=HEAD, status=None)
    )
    admitted = await app.admit_review_round(
        env.db,
        REVIEWER,
        app.AdmissionRequest(
            run_id=run,
            attempt_key=f"{session_id}:1",
            kind=AttemptKind.INITIAL,
            trigger=Trigger.OPERATOR_REQUEST,
            head_sha=HEAD,
            selection={},
            session_id=session_id if name_session else "",
        ),
    )
    return admitted.receipt.receipt_id


async def _overdue_now(env: Env) -> None:
    """An admin sets timeoutMinutes to 0 for the project: every review in flight is overdue."""
    await app.set_gate_config(env.db, env.gate, ADMIN, {"timeout_minutes": 0})


async def test_a_review_left_in_flight_is_ended_by_the_sweep_alone(open_db: OpenDb) -> None:
    env = await _env(open_db)
    receipt = await _in_flight_with_receipt(env)
    # Within timeoutMinutes (default 5) the sweep leaves it alone.
    assert await app.end_overdue_reviews(env.db, env.gate) == 0
    await _overdue_now(env)
    # The session never calls again; the sweep alone ends its review.
    assert await app.end_overdue_reviews(env.db, env.gate) == 1
    budget = await app.get_round_budget(env.db, AGENT, "s1-run")
    assert (budget.budget.used, budget.budget.no_verdict) == (0, 1)  # the no-verdict round is refunded
    async with env.db.engine.connect() as conn:
        settled = await store.admission(conn, "prj_1", receipt)
    assert settled is not None and (settled.outcome, settled.reason) == (Outcome.NO_VERDICT, "timed_out")
    # The session is free: its next turn claims a new review, which the next sweep ends without
    # touching the settled attempt.
    again = await _turn(env)
    assert again.not_due_reason is None and again.counters.in_flight
    assert await app.end_overdue_reviews(env.db, env.gate) == 1
    budget = await app.get_round_budget(env.db, AGENT, "s1-run")
    assert (budget.budget.used, budget.budget.no_verdict) == (0, 1)


async def test_an_attempt_that_named_no_session_keeps_counting(open_db: OpenDb) -> None:
    """Nothing but the admission's session_id ties a receipt to a spec 001 session; the sweep ends the
    review and leaves a receipt it cannot tie unsettled, so it counts (fails closed) until its
    admission owner settles it."""
    env = await _env(open_db)
    receipt = await _in_flight_with_receipt(env, name_session=False)
    await _overdue_now(env)
    assert await app.end_overdue_reviews(env.db, env.gate) == 1
    budget = await app.get_round_budget(env.db, AGENT, "s1-run")
    assert (budget.budget.used, budget.budget.no_verdict) == (1, 0)
    receipt_now, _ = await app.settle_attempt(
        env.db, REVIEWER, receipt_id=receipt, no_verdict_reason="timed_out"
    )
    assert receipt_now.outcome is Outcome.NO_VERDICT


async def test_the_background_job_runs_the_sweep(open_db: OpenDb) -> None:
    env = await _env(open_db)
    await _in_flight_with_receipt(env)
    await _overdue_now(env)
    assert SPEC.background is not None
    (job,) = SPEC.background(env)
    task = asyncio.create_task(job())
    try:
        for _ in range(1000):  # each pass of the job is 10 ms apart
            budget = await app.get_round_budget(env.db, AGENT, "s1-run")
            if budget.budget.no_verdict:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert (budget.budget.used, budget.budget.no_verdict) == (0, 1)


async def test_two_sweeps_racing_end_it_once(open_db: OpenDb) -> None:
    env = await _env(open_db)
    await _in_flight_with_receipt(env, "s1")
    await _in_flight_with_receipt(env, "s2")
    await _overdue_now(env)
    # Two replicas' sweeps at once.
    ended = await asyncio.gather(*(app.end_overdue_reviews(env.db, env.gate) for _ in range(2)))
    assert sum(ended) == 2, ended  # each of the two reviews ended once
    for run in ("s1-run", "s2-run"):
        budget = await app.get_round_budget(env.db, AGENT, run)
        assert (budget.budget.used, budget.budget.no_verdict) == (0, 1)
    # Interleaved: both replicas saw the same review in flight before either ended it.
    await _turn(env, "s1")
    async with env.db.engine.connect() as conn:
        (seen,) = [r for r in await store.reviews_in_flight(conn) if r.session_id == "s1"]
    async with env.db.transaction() as uow:
        assert await store.end_in_flight(uow.conn, seen)
    async with env.db.transaction() as uow:
        assert not await store.end_in_flight(uow.conn, seen)
    # A stale sweep never ends the review the session claimed after the one it saw.
    assert (await _turn(env, "s1")).counters.in_flight
    async with env.db.transaction() as uow:
        assert not await store.end_in_flight(uow.conn, seen)
    async with env.db.transaction() as uow:
        assert not await store.end_in_flight(uow.conn, replace(seen, since=seen.since + timedelta(0, 1)))
    async with env.db.engine.connect() as conn:
        assert [r.session_id for r in await store.reviews_in_flight(conn)] == ["s1"]


async def test_an_idle_sweep_records_no_span(open_db: OpenDb, monkeypatch: pytest.MonkeyPatch) -> None:
    env = await _env(open_db)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The store's statements traced as the service's SQLAlchemy instrumentation traces them.
    usage = NoOpMeter("sql").create_up_down_counter("db.client.connections.usage")
    EngineTracer(provider.get_tracer("sql"), env.db.engine.sync_engine, usage)
    monkeypatch.setattr(gate_app, "tracer", provider.get_tracer("sweep"))
    assert await app.end_overdue_reviews(env.db, env.gate) == 0
    assert exporter.get_finished_spans() == ()  # nothing in flight
    await _in_flight_with_receipt(env)
    exporter.clear()
    assert await app.end_overdue_reviews(env.db, env.gate) == 0
    assert exporter.get_finished_spans() == ()  # in flight, not overdue
    await _overdue_now(env)
    exporter.clear()
    assert await app.end_overdue_reviews(env.db, env.gate) == 1
    spans = exporter.get_finished_spans()
    (sweep,) = [s for s in spans if s.name == "review.timeout_sweep"]
    assert sweep.attributes is not None and sweep.attributes["reviewloop.ended"] == 1
    assert sweep.context is not None
    # Every statement of the sweep that ended something is inside its span.
    assert all(
        s.parent is not None and s.parent.span_id == sweep.context.span_id for s in spans if s is not sweep
    )


async def test_a_busy_binding_from_before_leases_holds_a_default_lease(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _catalog(db)
    warm = {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "warm"}
    cold = await _bind(db, {**warm, "mode": "cold"}, H1)
    await app.complete_review_session(db, REVIEWER, cold.session_id, H1)
    await _bind(db, warm, H2, review_id=cold.review_id)
    # Back to the lease migration's predecessor's shape: a busy row with no lease, as before leases.
    async with db.transaction() as uow:
        await uow.conn.execute(
            review_sessions.update()
            .where(review_sessions.c.session_id == cold.session_id)
            .values(lease_id=None, lease_expires_at=None)
        )
    await _migrate(db, "a7c3e1f0b2d4")
    before = datetime.now(UTC)
    await _migrate(db, "head")
    async with db.engine.connect() as conn:
        expires = (
            await conn.execute(
                select(review_sessions.c.lease_expires_at).where(
                    review_sessions.c.session_id == cold.session_id
                )
            )
        ).scalar_one()
    assert expires is not None
    expires = expires if expires.tzinfo else expires.replace(tzinfo=UTC)
    assert before + timedelta(seconds=110) < expires < datetime.now(UTC) + timedelta(seconds=130)
    # Its reviewer may still be running: a WARM review waits (visibly, never COLD) rather than take over.
    with pytest.raises(DomainError) as busy:
        await _bind(db, warm, H2, review_id=cold.review_id)
    assert busy.value.code is Code.WRONG_STATE and "busy" in busy.value.detail


async def _migrate(db: Database, target: str) -> None:
    """Move the store to ``target`` (a downgrade below head runs the newer revisions' downgrades)."""
    cfg = _config(SPEC.migrations_dir, SPEC.metadata)

    def run(sync_conn: object) -> None:
        cfg.attributes["connection"] = sync_conn
        if target == "head":
            command.upgrade(cfg, "head")
        else:
            command.downgrade(cfg, target)

    async with db.engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        await conn.run_sync(run)
