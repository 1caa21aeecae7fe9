"""The nudge queue on PostgreSQL: publish-to-visible latency and drain throughput, next to the floor.

- publish-to-visible: a long-poll (``wait_for_events``) parked on one replica's engine and listener,
  a nudge ingested through another replica's engine; time from the ingest call to the waiter's answer.
- ingest: 4 producers, each storing its 250 reviews' nudges. Relay-shaped (what ``Relay`` sends a
  destination: one head per review, up to its ``batch_size`` of 100 distinct reviews per ``Ingest``
  call), and the old shape for comparison (4 nudges of one review per call, on other agents' reviews).
- drain: nudges listed and acked by 4 concurrent consumers (4 agents draining their own queues,
  ``list_events`` pages of 200, acks of up to 100 reviews), against a plain
  ``SELECT ... FOR UPDATE SKIP LOCKED`` + ``UPDATE`` drain of the same rows by 4 raw asyncpg workers
  in the same run: the floor. Targets (issue 6): drain >= half the floor, p99 publish-to-visible < 50 ms.

Uses ``REVIEWLOOP_TEST_POSTGRES`` (default: the local server) and creates, then drops, its own database.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
from nudge import app, wakeup
from nudge.__main__ import SPEC
from reviewloop.storage import Database, make_engine
from reviewloop.storage.migrations import migrate
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.engine import make_url

from tests.conftest import PG_ENV, Databases
from tests.nudge.factory import event

LATENCY_ROUNDS = 200
CONSUMERS = 4
REVIEWS_PER_CONSUMER = 250
NUDGES_PER_REVIEW = 4
DRAIN_ROUNDS = 3
FLOOR_BATCH = 100
ACK_BATCH = 100
RELAY_BATCH = 100  # Relay.batch_size: heads of distinct reviews per Ingest call

AGENTS = [Principal("org_b", "prj_bench", ActorKind.AGENT, f"agt_{i}") for i in range(CONSUMERS)]
REASONS = ("rejected", "feedback_added", "redraft_requested", "rule_changed")


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


async def publish_to_visible(db: Database, other: Database) -> list[float]:
    samples = []
    agent = AGENTS[0]
    bell = wakeup.doorbell(db)
    for i in range(LATENCY_ROUNDS):
        answered_at = 0.0

        async def wait() -> None:
            nonlocal answered_at
            await app.wait_for_events(db, agent, timeout_s=10, limit=50)
            answered_at = time.perf_counter()

        waiter = asyncio.create_task(wait())
        while not bell.waiting(agent.project_id):  # noqa: ASYNC110 - parked by another task
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.005)
        review_id = f"rr_lat{i:04d}"
        started = time.perf_counter()
        await app.ingest(other, [event(review_id, "rejected", principal=agent)])
        await waiter
        samples.append(answered_at - started)
        await app.ack(db, agent, [(review_id, 1)])
    return samples


async def populate(db: Database, *, relay_shaped: bool = True) -> int:
    """Each producer's reviews with ``NUDGES_PER_REVIEW`` nudges each: relay-shaped, a round of one
    nudge per review in calls of ``RELAY_BATCH`` reviews; else (the old shape, on reviews of other
    agents the drain leaves alone) one call per review with its nudges."""

    async def produce(agent: Principal) -> None:
        prefix = "rr" if relay_shaped else "old"
        producer = (
            agent if relay_shaped else Principal(agent.org_id, agent.project_id, agent.actor_kind, "old")
        )
        reviews = [f"{prefix}_{agent.actor_id}_{r:04d}" for r in range(REVIEWS_PER_CONSUMER)]
        if not relay_shaped:
            for review_id in reviews:
                batch = [
                    event(review_id, reason, principal=producer) for reason in REASONS[:NUDGES_PER_REVIEW]
                ]
                await app.ingest(db, batch)
            return
        for reason in REASONS[:NUDGES_PER_REVIEW]:
            for i in range(0, len(reviews), RELAY_BATCH):
                chunk = reviews[i : i + RELAY_BATCH]
                await app.ingest(db, [event(review_id, reason, principal=producer) for review_id in chunk])

    await asyncio.gather(*(produce(a) for a in AGENTS))
    return CONSUMERS * REVIEWS_PER_CONSUMER * NUDGES_PER_REVIEW


async def drain(db: Database) -> int:
    async def consume(agent: Principal) -> int:
        drained = 0
        while True:
            page, _ = await app.list_events(db, agent, limit=200, cursor="")
            if not page:
                return drained
            heads: dict[str, int] = {}
            for nudge in page:
                heads[nudge.review_id] = max(nudge.seq, heads.get(nudge.review_id, 0))
            acks = list(heads.items())
            for i in range(0, len(acks), ACK_BATCH):
                await app.ack(db, agent, acks[i : i + ACK_BATCH])
            drained += len(page)

    return sum(await asyncio.gather(*(consume(a) for a in AGENTS)))


async def floor_drain(dsn: str) -> int:
    async def worker() -> int:
        conn = await asyncpg.connect(dsn)
        drained = 0
        try:
            while True:
                async with conn.transaction():
                    rows = await conn.fetch(
                        "SELECT id, review_id, seq, reason, payload FROM bench_plain WHERE NOT acked "
                        "ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
                        FLOOR_BATCH,
                    )
                    if not rows:
                        return drained
                    await conn.execute(
                        "UPDATE bench_plain SET acked = true WHERE id = any($1)", [r["id"] for r in rows]
                    )
                drained += len(rows)
        finally:
            await conn.close()

    return sum(await asyncio.gather(*(worker() for _ in range(CONSUMERS))))


async def run() -> list[tuple[str, list[float], str]]:
    os.environ.setdefault(PG_ENV, "postgresql://postgres@127.0.0.1:5432/postgres")
    with tempfile.TemporaryDirectory() as tmp:
        databases = Databases(Path(tmp))
        url = await databases.url("postgres", "nudge_bench")
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        db, other = Database(make_engine(url)), Database(make_engine(url))
        listener = asyncio.create_task(wakeup.listen(db))
        try:
            await migrate(db.engine, SPEC.migrations_dir, SPEC.metadata)
            await asyncio.wait_for(wakeup.doorbell(db).listening.wait(), 10)
            latency = await publish_to_visible(db, other)

            started = time.perf_counter()
            await populate(db, relay_shaped=False)
            old_ingest_s = time.perf_counter() - started
            started = time.perf_counter()
            total = await populate(db)
            ingest_s = time.perf_counter() - started
            admin = await asyncpg.connect(dsn)
            await admin.execute(
                "CREATE TABLE bench_plain AS SELECT pos AS id, review_id, seq, reason, payload, false AS acked "
                "FROM nudges WHERE review_id LIKE 'rr\\_agt%'; ALTER TABLE bench_plain ADD PRIMARY KEY (id); "
                "CREATE INDEX ON bench_plain (id) WHERE NOT acked; ANALYZE bench_plain; ANALYZE nudges"
            )
            ours, floor = [], []
            for _ in range(DRAIN_ROUNDS):
                await admin.execute(
                    "INSERT INTO unacked (pos, review_id, seq, org_id, project_id, agent_id) "
                    "SELECT n.pos, n.review_id, n.seq, h.org_id, h.project_id, h.agent_id FROM nudges n "
                    "JOIN review_heads h USING (review_id) WHERE n.review_id LIKE 'rr\\_agt%' "
                    "ON CONFLICT DO NOTHING"
                )
                await admin.execute("UPDATE bench_plain SET acked = false")
                await admin.execute("VACUUM ANALYZE unacked")
                await admin.execute("VACUUM ANALYZE bench_plain")
                started = time.perf_counter()
                drained = await drain(db)
                assert drained == total, (drained, total)
                ours.append(time.perf_counter() - started)
                started = time.perf_counter()
                assert await floor_drain(dsn) == total
                floor.append(time.perf_counter() - started)
            await admin.close()
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
            await other.dispose()
            await db.dispose()
            await databases.drop_all()
    ours_rate, floor_rate = total / statistics.median(ours), total / statistics.median(floor)
    return [
        (
            "nudge: publish-to-visible (postgres)",
            latency,
            f"p50 {pct(latency, 0.5) * 1e3:.1f} ms, p99 {pct(latency, 0.99) * 1e3:.1f} ms "
            "(ingest on replica B -> long-poll on replica A; target p99 < 50 ms)",
        ),
        (
            f"nudge: ingest {total} nudges, {CONSUMERS} producers, relay-shaped",
            [ingest_s],
            f"{total / ingest_s:,.0f} nudges/s (calls of up to {RELAY_BATCH} reviews' heads, one each; "
            "target >= 2,000)",
        ),
        (
            f"nudge: ingest {total} nudges, {CONSUMERS} producers, old shape",
            [old_ingest_s],
            f"{total / old_ingest_s:,.0f} nudges/s (calls of {NUDGES_PER_REVIEW} nudges of one review)",
        ),
        (
            f"nudge: drain {total} nudges, {CONSUMERS} consumers",
            ours,
            f"{ours_rate:,.0f} nudges/s listed + acked",
        ),
        (
            f"floor: SKIP LOCKED drain {total} rows, {CONSUMERS} workers",
            floor,
            f"{floor_rate:,.0f} rows/s; nudge drain = {ours_rate / floor_rate:.2f} x floor (target >= 0.5)",
        ),
    ]
