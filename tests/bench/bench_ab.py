"""One change's cost, measured against its parent with both stacks up at once (issue 18).

``make bench BENCH=bench_ab BENCH_AGAINST=<git revision>`` checks the revision out into a temporary
worktree (its stubs generated there), starts its stack and this tree's side by side on PostgreSQL as
``bench_lifecycle`` does (each store's pool holding ``BENCH_POOL`` connections, 6, so both fit the server),
and runs the lifecycle load on each in turn: A B, B A, A B... for ``BENCH_PAIRS`` pairs (4) of
``BENCH_LOAD_S`` seconds. ``BENCH_AB_LOOP=submit`` runs the submit-only load instead;
``BENCH_AB_TARGET=all`` runs both sides in monolithic mode (``reviewloop up --target all``).

On this box two runs of the same code minutes apart differ by more than most single changes (the
floor's own CPU per lifecycle moved 10% between consecutive runs): loads taken in alternation share
the box's state, so the difference between the two columns is the change's. Without ``BENCH_AGAINST``
this bench does nothing, so a plain ``make bench`` skips it.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url
from stack.launcher import Stack

from tests.bench import bench_lifecycle as lifecycle
from tests.conftest import PG_ENV, Databases, start_stack

REPO = Path(__file__).resolve().parents[2]
PAIRS = int(os.environ.get("BENCH_PAIRS", "4"))


@contextlib.contextmanager
def worktree(revision: str, into: Path) -> Iterator[Path]:
    """``revision`` checked out at ``into``, with its protobuf stubs generated as ``make proto`` does."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(into), revision], check=True)
    try:
        protos = sorted(str(p.relative_to(into / "proto")) for p in (into / "proto").rglob("*.proto"))
        libs = str(into / "libs")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                "-I",
                str(into / "proto"),
                f"--python_out={libs}",
                f"--grpc_python_out={libs}",
                *protos,
            ],
            check=True,
        )
        for v1 in (into / "libs" / "reviewloop").glob("*/v1"):
            (v1 / "__init__.py").touch()
            (v1.parent / "__init__.py").touch()
        yield into
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(into)], check=False)


async def side(databases: Databases, data: Path, tree: Path | None) -> tuple[Stack, lifecycle.Target]:
    """A stack of ``tree``'s services (this tree's when None) and its load target."""
    env = dict(lifecycle.STACK_ENV)
    if tree is not None:  # its services and libs first; the bench's own code stays this tree's
        env["PYTHONPATH"] = os.pathsep.join([str(tree / "services"), str(tree / "libs"), str(REPO)])
    stack = await start_stack(databases, "postgres", data, env, target=os.environ.get("BENCH_AB_TARGET"))
    try:
        return stack, await lifecycle.stack_target(data.name, stack)
    except BaseException:
        stack.stop_all()
        raise


async def run() -> list[tuple[str, list[float], str]]:
    revision = os.environ.get("BENCH_AGAINST")
    if not revision:
        print("bench_ab: set BENCH_AGAINST=<git revision> to measure this tree against it", file=sys.stderr)
        return []
    loop = lifecycle.submit_loop if os.environ.get("BENCH_AB_LOOP") == "submit" else lifecycle.lifecycle_loop
    per = "submit" if loop is lifecycle.submit_loop else "lifecycle"
    os.environ.setdefault(PG_ENV, "postgresql://postgres@127.0.0.1:5432/postgres")
    server = make_url(os.environ[PG_ENV]).set(drivername="postgresql").render_as_string(hide_password=False)
    cpu: dict[str, list[float]] = {"against": [], "this tree": []}
    by_process: dict[str, list[dict[str, float]]] = {"against": [], "this tree": []}
    with tempfile.TemporaryDirectory() as tmp, worktree(revision, Path(tmp) / "tree") as tree:
        databases = Databases(Path(tmp))
        admin = await asyncpg.connect(server)
        stacks: list[Stack] = []
        try:
            theirs_stack, theirs = await side(databases, Path(tmp) / "against", tree)
            stacks.append(theirs_stack)
            ours_stack, ours = await side(databases, Path(tmp) / "this tree", None)
            stacks.append(ours_stack)
            for target in (theirs, ours):  # a first load each, unmeasured: caches, plans, pools
                await lifecycle.load(target, admin, loop)
            for pair in range(PAIRS):
                for target in (theirs, ours) if pair % 2 == 0 else (ours, theirs):
                    done = await lifecycle.load(target, admin, loop)
                    n = max(1, done.run.lifecycles if per == "lifecycle" else done.run.submits)
                    cpu[target.name].append(sum(done.cpu.values()) / n)
                    by_process[target.name].append({k: 1000 * v / n for k, v in done.cpu.items()})
        finally:
            for stack in stacks:
                stack.stop_all()
            await admin.close()
            await databases.drop_all()
    for name, runs in by_process.items():
        parts = [f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in sorted(runs[0])]
        print(f"CPU ms per {per}, {name}: " + ", ".join(parts))
    note = f"server CPU per {per}, {PAIRS} loads each, in alternation"
    return [(f"ab: {revision}", cpu["against"], note), ("ab: this tree", cpu["this tree"], note)]
