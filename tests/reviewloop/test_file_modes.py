"""The data directory and its files are the service user's alone (issue 36): a fresh data dir is 0700
and a SQLite store, its WAL and shared-memory files, the logs and the traces are 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from reviewloop.storage import make_engine
from reviewloop.telemetry import JsonLinesExporter
from sqlalchemy import text
from stack.launcher import Stack


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_sqlite_store_and_the_directories_made_for_it_are_private(tmp_path: Path) -> None:
    data = tmp_path / "fresh" / ".data"
    engine = make_engine(f"sqlite+aiosqlite:///{data}/review_state.db")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
            await conn.execute(text("INSERT INTO t VALUES (1)"))
        files = sorted(data.iterdir())
        assert {f.name for f in files} >= {"review_state.db", "review_state.db-wal", "review_state.db-shm"}
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
        assert mode(data) == mode(data.parent) == 0o700
    finally:
        await engine.dispose()


async def test_a_store_created_world_readable_before_is_made_private(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    old.touch(mode=0o644)
    old.chmod(0o644)
    engine = make_engine(f"sqlite+aiosqlite:///{old}")
    await engine.dispose()
    assert mode(old) == 0o600


def test_the_launchers_logs_and_the_traces_are_private(tmp_path: Path) -> None:
    data = tmp_path / "up" / ".data"
    stack = Stack({**os.environ, "REVIEWLOOP_DATA_DIR": str(data)})
    stack.start("diff")  # whether it serves does not matter here: its log is made first
    stack.stop_all()
    JsonLinesExporter(data / "traces.jsonl").shutdown()
    assert mode(data) == mode(data / "logs") == 0o700
    assert mode(data / "logs" / "diff.log") == mode(data / "traces.jsonl") == 0o600
