"""The capacity model's inputs and its check (docs/performance.md, "Capacity model"; issue 39).

One stack on PostgreSQL as ``make run`` starts it (every part its own process), under the lifecycle load
of ``bench_lifecycle`` (the same agents and loop): each process's CPU per lifecycle, and each service's
connection-held time per lifecycle, by Little's law from PostgreSQL's own view (``pg_stat_activity``
sampled every ``SAMPLE_S``: the mean number of its backends in a statement or a transaction, over the
lifecycle rate). Then a second replica each of review_state, nudge and the gateway on the same databases
(as tests/e2e/test_replicas.py runs them), the agents split between the two gateways: the same figures,
each service's summed over its replicas, and the peak of busy connections beside what the model predicts
for the rate measured. ``make bench BENCH=bench_capacity``; ``BENCH_AGENTS``, ``BENCH_LOAD_S`` as for
``bench_lifecycle``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url
from stack.launcher import Stack, free_port
from stack.topology import ALL

from tests.bench.bench_lifecycle import (
    STACK_ENV,
    Run,
    Target,
    backend_pids,
    cpu_s,
    lifecycle_loop,
    stack_target,
    vacuumed,
)
from tests.bench.capacity import plan
from tests.bench.client import Client
from tests.conftest import PG_ENV, Databases, start_stack

LOAD_S = float(os.environ.get("BENCH_LOAD_S", "8"))
SAMPLE_S = 0.01
REPLICATED = ("review_state", "nudge", "gateway")
RATES = (100, 1_000, 10_000)
BUSY = "SELECT datname, count(*) AS n FROM pg_stat_activity WHERE datname = any($1::text[]) AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction') GROUP BY datname"


async def sample_busy(admin: asyncpg.Connection, datnames: list[str], until: float) -> dict[str, list[int]]:
    """Each database's busy backends, every ``SAMPLE_S`` until ``until``."""
    seen: dict[str, list[int]] = {name: [] for name in datnames}
    while time.monotonic() < until:
        counts = {row["datname"]: row["n"] for row in await admin.fetch(BUSY, datnames)}
        for name in datnames:
            seen[name].append(counts.get(name, 0))
        await asyncio.sleep(SAMPLE_S)
    return seen


async def load(
    targets: list[Target], pids: dict[str, list[int]], services: dict[str, str], admin: asyncpg.Connection
) -> dict[str, float]:
    """The lifecycle load on every agent of ``targets[0]``, split between the targets' gateways: the rate,
    each process kind's CPU ms per lifecycle (its replicas summed), each service's held ms per lifecycle
    and peak busy connections."""
    datnames = list(services)
    await vacuumed(datnames)
    run = Run()
    keys = targets[0].keys
    clients = [Client(t.base, max_connections=4 * len(keys)) for t in targets]
    for client in clients:
        await client.__aenter__()
    try:
        pg = await backend_pids(admin, datnames)
        every = [pid for group in pids.values() for pid in group]
        before = cpu_s([*every, *pg])
        started = time.monotonic()
        until = started + LOAD_S
        sampler = asyncio.create_task(sample_busy(admin, datnames, until))
        await asyncio.gather(
            *(lifecycle_loop(clients[i % len(clients)], a, h, run, until) for i, (a, h) in enumerate(keys))
        )
        elapsed = time.monotonic() - started
        busy = await sampler
        after = cpu_s([*every, *set(pg) | set(await backend_pids(admin, datnames))])
    finally:
        for client in clients:
            await client.__aexit__(None, None, None)
    assert not run.wrong, run.wrong[:5]
    n = max(1, run.lifecycles)
    rate = run.lifecycles / elapsed
    used = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
    figures = {"lifecycles_per_s": rate}
    for name, group in pids.items():
        figures[f"cpu_ms.{name}"] = 1000 * sum(used.get(pid, 0.0) for pid in group) / n
    figures["cpu_ms.postgres"] = 1000 * sum(t for pid, t in used.items() if pid not in every) / n
    for datname, service in services.items():
        figures[f"held_ms.{service}"] = 1000 * statistics.fmean(busy[datname] or [0]) / max(rate, 1e-9)
        figures[f"peak.{service}"] = max(busy[datname] or [0])
    return figures


def report(one: dict[str, float], two: dict[str, float]) -> None:
    names = sorted({key.split(".", 1)[1] for key in one if key.startswith("cpu_ms.")})
    stores = sorted({key.split(".", 1)[1] for key in one if key.startswith("held_ms.")})
    print(f"\ncapacity inputs (box load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end)")
    print(f"{'figure':<34} {'one replica':>12} {'two replicas':>13}")
    print(f"{'lifecycles/s':<34} {one['lifecycles_per_s']:>12.1f} {two['lifecycles_per_s']:>13.1f}")
    for name in names:
        print(
            f"{'CPU ms per lifecycle, ' + name:<34} {one[f'cpu_ms.{name}']:>12.2f} {two[f'cpu_ms.{name}']:>13.2f}"
        )
    for name in stores:
        print(
            f"{'held ms per lifecycle, ' + name:<34} {one[f'held_ms.{name}']:>12.2f} {two[f'held_ms.{name}']:>13.2f}"
        )
    cpu = {name: one[f"cpu_ms.{name}"] for name in names}
    held = {name: one[f"held_ms.{name}"] for name in stores}
    check = plan(two["lifecycles_per_s"], cpu, held)
    print(
        f"\nthe check, at the two-replica rate {two['lifecycles_per_s']:.1f}/s (model from the one-replica run):"
    )
    for name in stores:
        predicted = two["lifecycles_per_s"] * held[name] / 1000
        print(
            f"  {name:<16} busy connections: predicted mean {predicted:.2f} (planned {check.connections[name]}), measured peak {two[f'peak.{name}']:.0f}"
        )
    print("\nthe plan (replicas at 0.6 of a core; connections = 2 x rate x held time):")
    for rate in RATES:
        p = plan(rate, cpu, held)
        parts = ", ".join(f"{n} {r}" for n, r in sorted(p.replicas.items()))
        conns = ", ".join(
            f"{n} {c} ({p.pool_per_replica[n]}/replica)" for n, c in sorted(p.connections.items())
        )
        print(f"  {rate:>6}/s: replicas {parts}; connections {conns}; PostgreSQL {p.postgres_cores} cores")


async def run() -> list[tuple[str, list[float], str]]:
    os.environ.setdefault(PG_ENV, "postgresql://postgres@127.0.0.1:5432/postgres")
    server = make_url(os.environ[PG_ENV]).set(drivername="postgresql").render_as_string(hide_password=False)
    with tempfile.TemporaryDirectory() as tmp:
        databases = Databases(Path(tmp))
        admin = await asyncpg.connect(server)
        stacks: list[Stack] = []
        try:
            first = await start_stack(databases, "postgres", Path(tmp) / "a", dict(STACK_ENV), wait_s=300)
            stacks.append(first)
            target = await stack_target("one", first)
            services = {make_url(first.env[f"REVIEWLOOP_{n.upper()}_DB"]).database or "": n for n in ALL}
            pids = {name: [proc.pid] for name, proc in first.procs.items()}
            one = await load([target], pids, services, admin)
            env = dict(first.env, REVIEWLOOP_DATA_DIR=str(Path(tmp) / "b"))
            for name in REPLICATED:
                env[f"REVIEWLOOP_{name.upper()}_ADDR"] = f"127.0.0.1:{free_port()}"
                env[f"REVIEWLOOP_{name.upper()}_METRICS_ADDR"] = f"127.0.0.1:{free_port()}"
            second = Stack(env)
            stacks.append(second)
            for name in REPLICATED:
                second.start(name)
            await second.wait_serving(REPLICATED, 300)
            for name, proc in second.procs.items():
                pids[name].append(proc.pid)
            other = Target("two", f"http://{second.address('gateway')}", {}, [], target.keys)
            two = await load([target, other], pids, services, admin)
        finally:
            for stack in reversed(stacks):
                stack.stop_all()
            await admin.close()
            await databases.drop_all()
    report(one, two)
    return []
