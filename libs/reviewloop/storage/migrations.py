"""Run and write Alembic migrations for a service's store."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import MetaData, text
from sqlalchemy.ext.asyncio import AsyncEngine

from reviewloop.storage.engine import WRITE_OPTION, make_engine

_ENV_DIR = Path(__file__).parent / "alembic"


def _config(versions_dir: Path, metadata: MetaData) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_ENV_DIR))
    cfg.set_main_option("version_locations", str(versions_dir))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["target_metadata"] = metadata
    return cfg


def migration_lock_key(versions_dir: Path) -> int:
    """The PostgreSQL advisory-lock key of one store's migrations.

    A signed 64-bit number from the service's directory name: the same in every replica and release.
    """
    digest = hashlib.sha256(f"reviewloop.migrate:{versions_dir.parent.name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def migrate(engine: AsyncEngine, versions_dir: Path, metadata: MetaData) -> None:
    """Upgrade the store to the newest revision in ``versions_dir``, one migrator at a time.

    Replicas booting together take turns: on PostgreSQL a transaction-scoped advisory lock is taken
    before Alembic reads the version table (and released at commit), so the first upgrades and the
    others find the store at head; on SQLite the write transaction serializes them the same way.
    """
    cfg = _config(versions_dir, metadata)

    def upgrade(sync_conn: Any) -> None:
        cfg.attributes["connection"] = sync_conn
        command.upgrade(cfg, "head")

    async with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": migration_lock_key(versions_dir)}
            )
        await conn.run_sync(upgrade)


async def new_revision(versions_dir: Path, metadata: MetaData, message: str) -> None:
    """Autogenerate a revision: what ``metadata`` has that the existing revisions do not create."""
    cfg = _config(versions_dir, metadata)
    versions_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a developer command, not a server path
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite+aiosqlite:///{tmp}/scratch.db")
        await migrate(engine, versions_dir, metadata)

        def revision(sync_conn: Any) -> None:
            cfg.attributes["connection"] = sync_conn
            command.revision(cfg, message=message, autogenerate=True, version_path=str(versions_dir))

        async with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
            await conn.run_sync(revision)
        await engine.dispose()
