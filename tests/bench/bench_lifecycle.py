"""The whole review lifecycle on PostgreSQL against its one-process floor (issues 18, 39), in the same run.

Two stacks, each part on its own PostgreSQL database and the services on Unix sockets as ``reviewloop up``
places them: microservices mode (every service and the gateway its own process, as ``make run``) and
monolithic mode (``reviewloop up --target all``: every part in one process); the floor is
``tests.bench.floor_app``. Each load runs on each of the three in turn, so every ratio is taken in one run. ``AGENTS`` agents, each its own project with
an agent key and a human key, loop for ``LOAD_S`` seconds: submit, get, human open, human approve (the
send is the deliver step), long-poll until the review's terminal nudge is seen, ack. Figures are medians
of ``RUNS`` runs (min..max beside them):

- lifecycles/s;
- server CPU per lifecycle: utime+stime from /proc/<pid>/stat of every server process and of the
  PostgreSQL backends connected to the system's databases;
- submit p99 under that load;
- approve answered -> terminal nudge seen by the agent's long-poll, p50 and p99;
- approve answered -> terminal nudge stored (its ``created_at`` in nudge's store), p50 and p99; the
  floor stores it in the approve's own transaction, so its figure is 0;
- then a submit-only load (the same agents only submitting, for ``LOAD_S`` seconds): submits/s, submit
  p99 and server CPU per submit;
- then submits offered open-loop at half the floor's submit-only rate of the same run (arrivals on a
  fixed schedule whatever the answers, latency from each arrival's scheduled time): p99;
- then, idle, one agent whose long-poll is already waiting when its review is approved: approve
  answered -> terminal nudge returned to that long-poll, p50 and p99 (``IDLE_N`` lifecycles).

Each load starts on vacuumed and analyzed databases, as autovacuum keeps a production server's; this
machine's PostgreSQL runs with autovacuum off (``vacuumed``).

Every submit and every decision carries an ``Idempotency-Key``, as the SDK sends them, and every
``RETRY_EVERY``-th lifecycle sends its submit and its approve again with the same key, as an agent whose
answer was lost does. The benchmark checks its own results: every lifecycle sees exactly one terminal
nudge for its review, a retried submit answers with the review the first one made, and a retried approve
is answered (a second approve of the same version would be a 409).
``BENCH_JSON=path`` also writes the figures as JSON, so two runs can be compared. ``BENCH_PROFILE=dir``
records every reviewloop process with py-spy during the first lifecycle load (``dir/<process>.txt``,
collapsed stacks: one line a stack, its sample count last; ``BENCH_PROFILE_HZ`` samples per second, 67;
``BENCH_PROFILE_GIL=1`` only the samples of the thread holding the GIL, the CPU spent in Python;
``BENCH_PROFILE_NATIVE=1`` with the native frames too: the C of uvloop, gRPC and asyncpg, and syscalls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url
from stack.launcher import Stack, free_port
from stack.topology import ALL, GATEWAY, SERVICES

from tests.bench.client import Client
from tests.conftest import ADMIN_TOKEN, PG_ENV, Databases, draft, start_stack

AGENTS = int(os.environ.get("BENCH_AGENTS", "16"))
LOAD_S = float(os.environ.get("BENCH_LOAD_S", "8"))
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
PROFILE = os.environ.get("BENCH_PROFILE")
IDLE_N = int(os.environ.get("BENCH_IDLE_N", "40"))
RETRY_EVERY = int(os.environ.get("BENCH_RETRY_EVERY", "8"))
TERMINAL = {"sent", "send_failed", "cancelled", "rejected"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def keyed(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with a fresh ``Idempotency-Key``, as the SDK sends on every mutation."""
    return {**headers, "Idempotency-Key": uuid.uuid4().hex}


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] if ordered else float("nan")


def cpu_s(pids: list[int]) -> dict[int, float]:
    """utime + stime of each of ``pids`` in seconds (a process that has gone is left out)."""
    seconds = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            seconds[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return seconds


@dataclass
class Run:
    lifecycles: int = 0
    submits: int = 0
    submit_s: list[float] = field(default_factory=list)
    nudge_s: list[float] = field(default_factory=list)
    answered: dict[str, float] = field(default_factory=dict)  # review id -> approve answered, epoch s
    wrong: list[str] = field(default_factory=list)


@dataclass
class Target:
    """A system under load: its base URL, its server pids and the databases of its PostgreSQL backends."""

    name: str
    base: str
    pids: dict[str, int]  # process name -> pid
    datnames: list[str]
    keys: list[tuple[dict[str, str], dict[str, str]]] = field(default_factory=list)
    traces: Path | None = None  # the stack's traces.jsonl, whose lines are spans
    nudge_dsn: str | None = None  # nudge's database, where a terminal nudge's created_at is read


def spans(path: Path | None) -> int:
    """How many spans ``path`` holds so far (0 for the floor, which writes none)."""
    if path is None or not path.exists():
        return 0
    with path.open("rb") as lines:
        return sum(1 for _ in lines)


async def backend_pids(admin: asyncpg.Connection, datnames: list[str]) -> list[int]:
    rows = await admin.fetch("SELECT pid FROM pg_stat_activity WHERE datname = any($1::text[])", datnames)
    return [r["pid"] for r in rows]


async def lifecycle_loop(
    http: Client, agent: dict[str, str], human: dict[str, str], run: Run, until: float
) -> None:
    n = 0
    while time.monotonic() < until:
        n += 1
        retry = n % RETRY_EVERY == 0
        body, submit_headers = draft(subject=f"bench {n}"), keyed(agent)
        started = time.perf_counter()
        sent = await http.post("/v1/messages", json=body, headers=submit_headers)
        run.submit_s.append(time.perf_counter() - started)
        assert sent.status_code == 202, sent.text
        review_id = sent.json()["review_id"]
        if retry:
            again = await http.post("/v1/messages", json=body, headers=submit_headers)
            if again.status_code != 202 or again.json()["review_id"] != review_id:
                run.wrong.append(
                    f"{review_id}: its submit retried answered {again.status_code} {again.text[:200]}"
                )
        got = await http.get(f"/v1/reviews/{review_id}", headers=agent)
        assert got.status_code == 200, got.text
        opened = await http.post(
            f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
        )
        assert opened.status_code == 200, opened.text
        current = opened.json()
        approve = {"action": "approve", "revision": current["revision"], "version": current["version"]}
        approve_headers = keyed(human)
        approved = await http.post(f"/v1/reviews/{review_id}/decision", json=approve, headers=approve_headers)
        assert approved.status_code == 200, approved.text
        answered = time.perf_counter()
        run.answered[review_id] = time.time()
        if retry:
            again = await http.post(
                f"/v1/reviews/{review_id}/decision", json=approve, headers=approve_headers
            )
            if again.status_code != 200:
                run.wrong.append(
                    f"{review_id}: its approve retried answered {again.status_code} {again.text[:200]}"
                )
        terminal: list[dict[str, Any]] = []
        while not terminal:
            waited = await http.get("/v1/review-events/wait", params={"timeout_s": 10}, headers=agent)
            assert waited.status_code == 200, waited.text
            events = waited.json()["events"]
            if not events:
                run.wrong.append(f"{review_id}: no terminal nudge within 10 s")
                return
            terminal = [e for e in events if e["review_id"] == review_id and e["reason"] in TERMINAL]
            heads: dict[str, int] = {}
            for e in events:
                heads[e["review_id"]] = max(heads.get(e["review_id"], 0), e["seq"])
            acked = await http.post(
                "/v1/review-events/ack",
                json={"acks": [{"review_id": r, "seq": s} for r, s in heads.items()]},
                headers=agent,
            )
            assert acked.status_code == 200, acked.text
        run.nudge_s.append(time.perf_counter() - answered)
        if len(terminal) != 1:
            run.wrong.append(f"{review_id}: {len(terminal)} terminal nudges")
        run.lifecycles += 1


async def submit_loop(
    http: Client, agent: dict[str, str], _human: dict[str, str], run: Run, until: float
) -> None:
    while time.monotonic() < until:
        started = time.perf_counter()
        sent = await http.post(
            "/v1/messages", json=draft(subject=f"bench submit {run.submits}"), headers=keyed(agent)
        )
        run.submit_s.append(time.perf_counter() - started)
        assert sent.status_code == 202, sent.text
        run.submits += 1


Loop = Callable[[Client, dict[str, str], dict[str, str], Run, float], Awaitable[None]]


@dataclass
class Load:
    """What one load used: the run's outcomes, its length, the CPU seconds of each process, spans."""

    run: Run
    elapsed: float
    cpu: dict[str, float]
    spans: int


async def vacuumed(datnames: list[str]) -> None:
    """VACUUM and ANALYZE each of ``datnames``, as autovacuum keeps a running server's tables.

    A server may run with autovacuum off (this machine's does): its tables then keep every dead row
    version and are planned without statistics, so each load would read more than the one before
    (PostgreSQL's CPU per lifecycle grew 3.4 -> 4.1 ms over four loads; with autovacuum on it stayed at
    3.1-3.5). Every load starts from the same state, for the floor as for reviewloop.
    """
    server = make_url(os.environ[PG_ENV]).set(drivername="postgresql")
    for datname in datnames:
        conn = await asyncpg.connect(server.set(database=datname).render_as_string(hide_password=False))
        try:
            await conn.execute("VACUUM (ANALYZE)")
        finally:
            await conn.close()


async def load(target: Target, admin: asyncpg.Connection, loop: Loop) -> Load:
    """Every agent runs ``loop`` for ``LOAD_S`` seconds, on freshly vacuumed databases; the CPU and spans
    it cost the servers."""
    await vacuumed(target.datnames)
    run = Run()
    async with Client(target.base, max_connections=4 * AGENTS) as http:
        pg = await backend_pids(admin, target.datnames)
        before, spans0 = cpu_s([*target.pids.values(), *pg]), spans(target.traces)
        started = time.monotonic()
        until = started + LOAD_S
        await asyncio.gather(*(loop(http, a, h, run, until) for a, h in target.keys))
        elapsed = time.monotonic() - started
        pg_after = await backend_pids(admin, target.datnames)
        after = cpu_s([*target.pids.values(), *set(pg) | set(pg_after)])
        # A backend that connected during the load did all its work in it; one that left is lost.
        used = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
        per_process = {name: used.get(pid, 0.0) for name, pid in target.pids.items()}
        per_process["postgres"] = sum(t for pid, t in used.items() if pid not in target.pids.values())
    await asyncio.sleep(0.5)  # each process flushes its spans every 200 ms
    assert not run.wrong, run.wrong[:5]
    return Load(run, elapsed, per_process, spans(target.traces) - spans0)


@contextlib.contextmanager
def profiled(target: Target, into: str | None) -> Iterator[None]:
    """py-spy records each of ``target``'s processes for the length of one load, into ``into``."""
    if into is None:
        yield
        return
    Path(into).mkdir(parents=True, exist_ok=True)
    spies = [
        subprocess.Popen(
            [
                Path(sys.executable).parent / "py-spy",
                "record",
                "-r",
                os.environ.get("BENCH_PROFILE_HZ", "67"),
                "-f",
                "raw",
                "-d",
                str(int(LOAD_S)),
                "-o",
                f"{into}/{name}.txt",
                *(["--gil"] if os.environ.get("BENCH_PROFILE_GIL") else []),
                *(["--native"] if os.environ.get("BENCH_PROFILE_NATIVE") else []),
                "--pid",
                str(pid),
            ],
            stdout=subprocess.DEVNULL,
        )
        for name, pid in target.pids.items()
    ]
    try:
        yield
    finally:
        for spy in spies:
            spy.wait(30)


async def stored_after_answer(target: Target, answered: dict[str, float]) -> list[float]:
    """Seconds from each approve's answer to its terminal nudge's ``created_at`` (0s for the floor,
    which stores it in the approve's transaction)."""
    if target.nudge_dsn is None:
        return [0.0] * len(answered)
    conn = await asyncpg.connect(target.nudge_dsn)
    try:
        rows = await conn.fetch(
            "SELECT review_id, extract(epoch FROM created_at)::float8 AS at FROM nudges "
            "WHERE review_id = any($1::text[]) AND reason = any($2::text[])",
            list(answered),
            sorted(TERMINAL),
        )
    finally:
        await conn.close()
    return [r["at"] - answered[r["review_id"]] for r in rows]


async def open_loop_submits(target: Target, rate: float) -> list[float]:
    """Submits arriving at ``rate`` per second for ``LOAD_S`` seconds, on a fixed schedule whatever the
    answers (no coordinated omission): each one's latency from its scheduled arrival."""
    latencies: list[float] = []
    async with Client(target.base, max_connections=4 * AGENTS) as http:

        async def submit(i: int, due: float) -> None:
            agent = target.keys[i % len(target.keys)][0]
            sent = await http.post(
                "/v1/messages", json=draft(subject=f"bench open {i}"), headers=keyed(agent)
            )
            assert sent.status_code == 202, sent.text
            latencies.append(time.perf_counter() - due)

        started = time.perf_counter()
        tasks = []
        for i in range(int(rate * LOAD_S)):
            due = started + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(submit(i, due)))
        await asyncio.gather(*tasks)
    return latencies


async def idle_nudges(target: Target) -> list[float]:
    """One agent, nothing else running: its long-poll is waiting when its review is approved; seconds
    from the approve's answer to that long-poll returning the review's terminal nudge."""
    agent, human = target.keys[0]
    samples = []
    async with Client(target.base) as http:

        async def drain() -> list[dict[str, Any]]:
            got = await http.get("/v1/review-events/wait", params={"timeout_s": 0}, headers=agent)
            events: list[dict[str, Any]] = got.json()["events"]
            if events:
                heads: dict[str, int] = {}
                for e in events:
                    heads[e["review_id"]] = max(heads.get(e["review_id"], 0), e["seq"])
                acks = [{"review_id": r, "seq": s} for r, s in heads.items()]
                await http.post("/v1/review-events/ack", json={"acks": acks}, headers=agent)
            return events

        for n in range(IDLE_N):
            while await drain():
                pass
            sent = (
                await http.post("/v1/messages", json=draft(subject=f"idle {n}"), headers=keyed(agent))
            ).json()
            review_id = sent["review_id"]
            opened = await http.post(
                f"/v1/reviews/{review_id}/open", json={"revision": 1, "version": 1}, headers=human
            )
            current = opened.json()
            while await drain():  # anything the submit or the open queued
                pass
            poll = asyncio.create_task(
                http.get("/v1/review-events/wait", params={"timeout_s": 10}, headers=agent)
            )
            await asyncio.sleep(0.05)  # the long-poll is parked in nudge
            approved = await http.post(
                f"/v1/reviews/{review_id}/decision",
                json={"action": "approve", "revision": current["revision"], "version": current["version"]},
                headers=keyed(human),
            )
            assert approved.status_code == 200, approved.text
            answered = time.perf_counter()
            events = (await poll).json()["events"]
            seen = time.perf_counter()
            while not any(e["review_id"] == review_id and e["reason"] in TERMINAL for e in events):
                assert events, f"{review_id}: no terminal nudge within 10 s"
                events = (
                    await drain()
                    or (
                        await http.get("/v1/review-events/wait", params={"timeout_s": 10}, headers=agent)
                    ).json()["events"]
                )
                seen = time.perf_counter()
            samples.append(max(0.0, seen - answered))  # 0: it was visible before the answer came
    return samples


async def measure(target: Target, admin: asyncpg.Connection, profile: str | None = None) -> dict[str, float]:
    """The lifecycle load, then the submit-only load, as one run's figures."""
    with profiled(target, profile):
        cycles = await load(target, admin, lifecycle_loop)
    stored = await stored_after_answer(target, cycles.run.answered)
    assert len(stored) == len(cycles.run.answered), "a lifecycle's terminal nudge was not stored once"
    submits = await load(target, admin, submit_loop)
    n, m = max(1, cycles.run.lifecycles), max(1, submits.run.submits)
    return {
        "lifecycles_per_s": cycles.run.lifecycles / cycles.elapsed,
        "cpu_ms_per_lifecycle": 1000 * sum(cycles.cpu.values()) / n,
        "submit_p99_ms": 1000 * pct(cycles.run.submit_s, 0.99),
        "approve_to_nudge_p50_ms": 1000 * pct(cycles.run.nudge_s, 0.5),
        "approve_to_nudge_p99_ms": 1000 * pct(cycles.run.nudge_s, 0.99),
        "approve_to_stored_p50_ms": 1000 * pct(stored, 0.5),
        "approve_to_stored_p99_ms": 1000 * pct(stored, 0.99),
        "spans_per_lifecycle": cycles.spans / n,
        "submits_per_s": submits.run.submits / submits.elapsed,
        "cpu_ms_per_submit": 1000 * sum(submits.cpu.values()) / m,
        "submit_only_p99_ms": 1000 * pct(submits.run.submit_s, 0.99),
        "spans_per_submit": submits.spans / m,
        **{f"cpu_ms_per_lifecycle.{name}": 1000 * t / n for name, t in cycles.cpu.items()},
        **{f"cpu_ms_per_submit.{name}": 1000 * t / m for name, t in submits.cpu.items()},
    }


# The stack as the bench runs it: the relay's poll as ``make run`` has it, and no span per statement.
# Each store's pool holds at most BENCH_POOL connections (6): the two stacks' twelve stores and the floor's
# 20 then fit PostgreSQL's default max_connections of 100, which at 20 a store they overran (a 500 from the
# monolith's rules: TooManyConnectionsError). Six is more than a store uses at 16 agents on two cores.
STACK_ENV = {
    "REVIEWLOOP_RELAY_POLL_S": "0.5",
    "REVIEWLOOP_TRACE_SQL": "0",
    "REVIEWLOOP_DB_POOL_SIZE": os.environ.get("BENCH_POOL", "6"),
}


async def stack_target(name: str, stack: Stack) -> Target:
    """``stack`` as a load's target: its processes, databases, keys (made now) and traces."""
    base = f"http://{stack.address(GATEWAY)}"
    return Target(
        name,
        base,
        {process: p.pid for process, p in stack.procs.items()},
        [make_url(stack.env[f"REVIEWLOOP_{n.upper()}_DB"]).database or "" for n in ALL],
        await stack_keys(base),
        stack.data_dir / "traces.jsonl",
        make_url(stack.env["REVIEWLOOP_NUDGE_DB"])
        .set(drivername="postgresql")
        .render_as_string(hide_password=False),
    )


async def stack_keys(base: str) -> list[tuple[dict[str, str], dict[str, str]]]:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    keys = []
    async with Client(base) as http:
        for _ in range(AGENTS):
            project = (await http.post("/v1/admin/projects", json={"name": "bench"}, headers=admin)).json()[
                "project_id"
            ]
            pair = []
            for kind in ("agent", "human"):
                made = await http.post(
                    "/v1/admin/api-keys", json={"project_id": project, "actor_kind": kind}, headers=admin
                )
                assert made.status_code == 201, made.text
                pair.append({"Authorization": f"Bearer {made.json()['api_key']}"})
            keys.append((pair[0], pair[1]))
    return keys


async def floor_keys(base: str) -> list[tuple[dict[str, str], dict[str, str]]]:
    keys = []
    async with Client(base) as http:
        for _ in range(AGENTS):
            made = (await http.post("/keys")).json()
            keys.append(
                ({"Authorization": f"Bearer {made['agent']}"}, {"Authorization": f"Bearer {made['human']}"})
            )
    return keys


async def wait_http(base: str, proc: subprocess.Popen[bytes]) -> None:
    async with Client(base, timeout=2) as http:
        for _ in range(200):
            if proc.poll() is not None:
                raise RuntimeError("the floor process died")
            with contextlib.suppress(OSError, TimeoutError):
                await http.get("/docs")
                return
            await asyncio.sleep(0.1)
    raise RuntimeError("the floor never answered")


FIGURES = [
    ("lifecycles/s", "lifecycles_per_s", "{:.1f}"),
    ("server CPU per lifecycle (ms)", "cpu_ms_per_lifecycle", "{:.1f}"),
    ("submit p99 (ms)", "submit_p99_ms", "{:.0f}"),
    ("approve -> terminal nudge seen p50 (ms)", "approve_to_nudge_p50_ms", "{:.1f}"),
    ("approve -> terminal nudge seen p99 (ms)", "approve_to_nudge_p99_ms", "{:.1f}"),
    ("approve answered -> terminal nudge stored p50 (ms)", "approve_to_stored_p50_ms", "{:.1f}"),
    ("approve answered -> terminal nudge stored p99 (ms)", "approve_to_stored_p99_ms", "{:.1f}"),
    ("trace spans per lifecycle", "spans_per_lifecycle", "{:.0f}"),
    ("submits/s, submit-only load", "submits_per_s", "{:.0f}"),
    ("server CPU per submit (ms)", "cpu_ms_per_submit", "{:.2f}"),
    ("submit p99, submit-only load (ms)", "submit_only_p99_ms", "{:.0f}"),
    ("trace spans per submit", "spans_per_submit", "{:.1f}"),
    ("submits offered open-loop at half the floor's rate, per s", "open_loop_rate", "{:.0f}"),
    ("submit p99 at that offered load (ms)", "open_loop_submit_p99_ms", "{:.1f}"),
    ("idle: approve -> terminal nudge to a waiting long-poll p50 (ms)", "idle_nudge_p50_ms", "{:.1f}"),
    ("idle: approve -> terminal nudge to a waiting long-poll p99 (ms)", "idle_nudge_p99_ms", "{:.1f}"),
]


# The systems measured beside the floor: every part its own process, and every part in one.
SYSTEMS = ("microservices", "monolithic")


def table(results: dict[str, list[dict[str, float]]]) -> Iterator[str]:
    yield (
        f"| figure (median of {RUNS}, min..max) | microservices | monolithic | floor "
        "| microservices / floor | monolithic / floor |"
    )
    yield "|---|---|---|---|---|---|"
    for label, key, fmt in FIGURES:
        medians, cells = [], []
        for name in (*SYSTEMS, "floor"):
            values = [r[key] for r in results[name]]
            medians.append(statistics.median(values))
            cells.append(f"{fmt.format(medians[-1])} ({fmt.format(min(values))}..{fmt.format(max(values))})")
        ratios = [f"{m / medians[-1]:.2f}" if medians[-1] else "-" for m in medians[:-1]]
        yield f"| {label} | {' | '.join(cells)} | {' | '.join(ratios)} |"


def start_floor(dsn: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.bench.floor_app", dsn, str(port)])


# Issue 39's targets: (what, figure, ratio to the floor's median or absolute ms, op, monolithic, microservices).
TARGETS = [
    ("server CPU per lifecycle", "cpu_ms_per_lifecycle", "ratio", "<=", 2.0, 3.0),
    ("lifecycles/s", "lifecycles_per_s", "ratio", ">=", 0.7, 0.5),
    ("submits/s, submit-only", "submits_per_s", "ratio", ">=", 0.8, 0.7),
    ("submit p99 under the lifecycle load", "submit_p99_ms", "ratio", "<=", 2.0, 3.0),
    ("idle: approve -> terminal nudge visible p99 (ms)", "idle_nudge_p99_ms", "ms", "<=", 5.0, 15.0),
]


def targets(results: dict[str, list[dict[str, float]]]) -> Iterator[str]:
    for what, key, kind, op, *bounds in TARGETS:
        floor = statistics.median(r[key] for r in results["floor"])
        for name, bound in zip(("monolithic", "microservices"), bounds, strict=True):
            ours = statistics.median(r[key] for r in results[name])
            value = ours / floor if kind == "ratio" else ours
            met = value >= bound if op == ">=" else value <= bound
            unit = "x" if kind == "ratio" else " ms"
            yield (
                f"target {'met    ' if met else 'NOT met'}: {name}: {what} {op} {bound:g}{unit} "
                f"({value:.2f}{unit})"
            )


def report(results: dict[str, list[dict[str, float]]]) -> None:
    print("\n".join(table(results)))
    print("\n".join(targets(results)))
    for per in ("lifecycle", "submit"):
        for name, runs in results.items():
            keys = sorted(k for k in runs[0] if k.startswith(f"cpu_ms_per_{per}."))
            parts = [f"{k.split('.', 1)[1]} {statistics.median(r[k] for r in runs):.2f}" for k in keys]
            print(f"CPU ms per {per}, {name}: " + ", ".join(parts))
    if path := os.environ.get("BENCH_JSON"):
        Path(path).write_text(json.dumps(results, indent=2))


def unix_addresses(where: Path) -> dict[str, str]:
    """Every service on a Unix socket under ``where`` (0700), as ``reviewloop up`` places them."""
    where.mkdir(mode=0o700, parents=True)
    return {f"REVIEWLOOP_{name.upper()}_ADDR": f"unix:{where / name}.sock" for name in SERVICES}


async def run() -> list[tuple[str, list[float], str]]:
    os.environ.setdefault(PG_ENV, "postgresql://postgres@127.0.0.1:5432/postgres")
    server = make_url(os.environ[PG_ENV]).set(drivername="postgresql").render_as_string(hide_password=False)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in (*SYSTEMS, "floor")}
    with tempfile.TemporaryDirectory() as tmp:
        databases = Databases(Path(tmp))
        admin = await asyncpg.connect(server)
        stacks: list[Stack] = []
        floor: subprocess.Popen[bytes] | None = None
        try:
            systems = []
            for name in SYSTEMS:
                env = {**STACK_ENV, **unix_addresses(Path(tmp) / f"{name}-sockets")}
                stack = await start_stack(
                    databases,
                    "postgres",
                    Path(tmp) / name,
                    env,
                    wait_s=300,  # a loaded box boots slowly
                    target="all" if name == "monolithic" else None,
                )
                stacks.append(stack)
                systems.append(await stack_target(name, stack))
            floor_url = await databases.url("postgres", "floor")
            floor_db = make_url(floor_url)
            port = free_port()
            floor = start_floor(
                floor_db.set(drivername="postgresql").render_as_string(hide_password=False), port
            )
            floor_base = f"http://127.0.0.1:{port}"
            await wait_http(floor_base, floor)
            theirs = Target(
                "floor",
                floor_base,
                {"floor": floor.pid},
                [floor_db.database or ""],
                await floor_keys(floor_base),
            )
            for i in range(RUNS):
                for target in (*systems, theirs):
                    into = f"{PROFILE}/{target.name}" if PROFILE and i == 0 and target is not theirs else None
                    results[target.name].append(await measure(target, admin, into))
                rate = results["floor"][-1]["submits_per_s"] / 2
                for target in (*systems, theirs):
                    figures = results[target.name][-1]
                    figures["open_loop_rate"] = rate
                    figures["open_loop_submit_p99_ms"] = 1000 * pct(
                        await open_loop_submits(target, rate), 0.99
                    )
                    idle = await idle_nudges(target)
                    figures["idle_nudge_p50_ms"] = 1000 * pct(idle, 0.5)
                    figures["idle_nudge_p99_ms"] = 1000 * pct(idle, 0.99)
        finally:
            if floor is not None:
                floor.terminate()
                floor.wait(10)
            for stack in stacks:
                stack.stop_all()
            await admin.close()
            await databases.drop_all()
    report(results)
    return []
