"""No secret at rest: every API key the console issues, however it is issued (with or without an
Idempotency-Key, replayed, by the bootstrap token or an admin key), is absent from every store of the
stack (each SQLite file, each PostgreSQL database's text columns) and from every file the stack writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url
from stack.launcher import Stack
from stack.topology import GATEWAY, SERVICES

from tests.conftest import Api


async def issue_every_way(api: Api) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
    """The secrets issued, and each replayed issue's key id with the replay's answer."""
    project = await api.project()
    secrets: list[str] = []
    replays: list[tuple[str, dict[str, Any]]] = []
    for kind in ("agent", "human", "review_agent", "admin"):
        secrets.append((await api.key(project["project_id"], kind))["api_key"])
    admin_key = await api.key(project["project_id"], "admin")
    secrets.append(admin_key["api_key"])
    for n, issuer in enumerate((api.admin, api.auth(admin_key["api_key"]))):
        for kind in ("agent", "human", "review_agent", "admin"):
            headers = {**issuer, "Idempotency-Key": f"issue-{n}-{kind}"}
            body = {"project_id": project["project_id"], "actor_kind": kind, "name": f"{kind} {n}"}
            first = await api.http.post("/v1/admin/api-keys", json=body, headers=headers)
            assert first.status_code == 201, first.text
            assert first.json()["api_key"].startswith("rlk_")
            secrets.append(first.json()["api_key"])
            again = await api.http.post("/v1/admin/api-keys", json=body, headers=headers)
            assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
            replays.append((first.json()["key_id"], again.json()))
    return secrets, replays


async def text_of_every_store(stack: Stack) -> bytes:
    """The raw bytes of every SQLite store, or every text column of every PostgreSQL store."""
    dumps: list[bytes] = []
    for name in (*SERVICES, GATEWAY):
        url = make_url(stack.env[f"REVIEWLOOP_{name.upper()}_DB"])
        if url.drivername.startswith("sqlite"):
            assert url.database
            for path in Path(url.database).parent.glob(Path(url.database).name + "*"):  # with -wal, -shm
                dumps.append(path.read_bytes())
            continue
        conn = await asyncpg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False))
        try:
            columns = await conn.fetch(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'json', 'jsonb')"
            )
            assert columns, f"{name} has no text columns to search"
            for table, column in columns:
                rows = await conn.fetch(f'SELECT "{column}"::text AS v FROM "{table}"')
                dumps += [str(row["v"]).encode() for row in rows if row["v"] is not None]
        finally:
            await conn.close()
    return b"\n".join(dumps)


async def test_no_issued_key_is_stored_or_written_in_plain(api: Api) -> None:
    secrets, replays = await issue_every_way(api)
    assert len(set(secrets)) == len(secrets) == 13 and len(replays) == 8
    stores = await text_of_every_store(api.stack)
    files = b"\n".join(p.read_bytes() for p in api.stack.data_dir.rglob("*") if p.is_file())
    assert b"idempotency" in stores or b"key_" in stores  # the stores were read
    for secret in secrets:
        stored, written = secret.encode() in stores, secret.encode() in files
        assert not stored, "an issued key is stored in plain"
        assert not written, "an issued key is written to a file of the stack"
        # ... and each still works: what is stored is enough to authenticate it.
        assert (await api.http.get("/v1/reviews", headers=api.auth(secret))).status_code in (200, 403)
    for key_id, replay in replays:  # a replay names the key it issued and says its secret was shown once
        assert replay["key_id"] == key_id and replay["api_key"] is None
        assert "shown once" in replay["note"]


async def test_a_retry_sent_the_moment_the_answer_starts_is_a_replay(api: Api) -> None:
    """The answer is remembered before its first byte leaves: a client that retries as soon as it sees
    the status line finds the replay, never ``409 still running`` (it did under load before)."""
    project = await api.project()
    body = {"project_id": project["project_id"], "actor_kind": "agent", "name": "eager"}
    for n in range(5):
        headers = {**api.admin, "Idempotency-Key": f"eager-{n}"}
        async with api.http.stream("POST", "/v1/admin/api-keys", json=body, headers=headers) as first:
            assert first.status_code == 201
            again = await api.http.post("/v1/admin/api-keys", json=body, headers=headers)
            await first.aread()
        assert (again.status_code, again.headers.get("idempotent-replayed")) == (201, "true"), again.text
        assert again.json()["key_id"] == first.json()["key_id"]
