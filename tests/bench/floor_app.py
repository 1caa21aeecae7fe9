"""The lifecycle floor of issue 18: one FastAPI + asyncpg process doing the plainest equivalent work.

Authenticate the key by its hash; submit inserts the review and an outbox row in one transaction; open
and approve are CAS updates, and the approve inserts the terminal nudge with the next seq in the same
transaction; list, long-poll and ack the caller's nudges. A submit or decision with an ``Idempotency-Key``
answers a retry with its first answer, remembered in its own transaction. Run: ``python -m tests.bench.floor_app DSN PORT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import uvicorn
from fastapi import FastAPI, Header, HTTPException, Request

SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (hash text PRIMARY KEY, project text NOT NULL, kind text NOT NULL);
CREATE TABLE IF NOT EXISTS reviews (id text PRIMARY KEY, project text NOT NULL, state text NOT NULL,
  revision int NOT NULL, version int NOT NULL, body jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (id bigserial PRIMARY KEY, aggregate text NOT NULL, payload jsonb NOT NULL,
  delivered_at timestamptz);
CREATE TABLE IF NOT EXISTS nudges (review_id text NOT NULL, seq int NOT NULL, project text NOT NULL,
  reason text NOT NULL, acked bool NOT NULL DEFAULT false, PRIMARY KEY (review_id, seq));
CREATE INDEX IF NOT EXISTS nudges_unacked ON nudges (project) WHERE NOT acked;
CREATE TABLE IF NOT EXISTS answers (project text NOT NULL, key text NOT NULL, answer jsonb NOT NULL,
  PRIMARY KEY (project, key));
"""

pool: asyncpg.Pool
bells: dict[str, asyncio.Event] = defaultdict(asyncio.Event)


@contextlib.asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    global pool
    pool = await asyncpg.create_pool(sys.argv[1], min_size=4, max_size=20)
    async with pool.acquire() as conn:
        await conn.execute(SCHEMA)
    yield
    await pool.close()


app = FastAPI(lifespan=lifespan)


Work = Callable[[Any], Awaitable[dict[str, Any]]]


async def once(project: str, key: str | None, work: Work) -> dict[str, Any]:
    """``work`` in one transaction, at most once per Idempotency-Key: a retry gets the first answer."""
    async with pool.acquire() as conn:
        for _ in range(2):  # a concurrent twin may win the key; the second pass reads its answer
            try:
                async with conn.transaction():
                    if key is not None:
                        first = await conn.fetchval(
                            "SELECT answer FROM answers WHERE project = $1 AND key = $2", project, key
                        )
                        if first is not None:
                            return dict(json.loads(first))
                    answer = await work(conn)
                    if key is not None:
                        await conn.execute(
                            "INSERT INTO answers VALUES ($1, $2, $3)", project, key, json.dumps(answer)
                        )
                    return answer
            except asyncpg.UniqueViolationError:
                continue
    raise HTTPException(409)


async def _caller(authorization: str) -> tuple[str, str]:
    digest = hashlib.sha256(authorization.removeprefix("Bearer ").encode()).hexdigest()
    row = await pool.fetchrow("SELECT project, kind FROM keys WHERE hash = $1", digest)
    if row is None:
        raise HTTPException(401)
    return row["project"], row["kind"]


@app.post("/keys")
async def new_key() -> dict[str, str]:
    project, agent, human = (secrets.token_hex(8) for _ in range(3))
    for key, kind in ((agent, "agent"), (human, "human")):
        await pool.execute(
            "INSERT INTO keys VALUES ($1, $2, $3)", hashlib.sha256(key.encode()).hexdigest(), project, kind
        )
    return {"agent": agent, "human": human}


@app.post("/v1/messages", status_code=202)
async def submit(
    request: Request, authorization: str = Header(), idempotency_key: str | None = Header(None)
) -> dict[str, Any]:
    project, _ = await _caller(authorization)
    body = await request.body()

    async def work(conn: Any) -> dict[str, Any]:
        review_id = "rr_" + secrets.token_hex(12)
        await conn.execute(
            "INSERT INTO reviews VALUES ($1, $2, 'pending_review', 1, 1, $3)",
            review_id,
            project,
            body.decode(),
        )
        await conn.execute(
            "INSERT INTO outbox (aggregate, payload) VALUES ($1, $2)",
            review_id,
            json.dumps({"review": review_id}),
        )
        return {"review_id": review_id, "state": "pending_review", "revision": 1, "version": 1}

    return await once(project, idempotency_key, work)


@app.get("/v1/reviews/{review_id}")
async def get(review_id: str, authorization: str = Header()) -> dict[str, Any]:
    project, _ = await _caller(authorization)
    row = await pool.fetchrow(
        "SELECT state, revision, version FROM reviews WHERE id = $1 AND project = $2", review_id, project
    )
    if row is None:
        raise HTTPException(404)
    return {"review_id": review_id, **dict(row)}


async def _cas(review_id: str, project: str, body: dict[str, Any], to: str, conn: Any) -> dict[str, Any]:
    row = await conn.fetchrow(
        "UPDATE reviews SET state = $1, version = version + 1 WHERE id = $2 AND project = $3 "
        "AND revision = $4 AND version = $5 RETURNING state, revision, version",
        to,
        review_id,
        project,
        body["revision"],
        body["version"],
    )
    if row is None:
        raise HTTPException(409)
    return {"review_id": review_id, **dict(row)}


@app.post("/v1/reviews/{review_id}/open")
async def open_(review_id: str, request: Request, authorization: str = Header()) -> dict[str, Any]:
    project, _ = await _caller(authorization)
    return await _cas(review_id, project, await request.json(), "in_review", pool)


@app.post("/v1/reviews/{review_id}/decision")
async def decide(
    review_id: str,
    request: Request,
    authorization: str = Header(),
    idempotency_key: str | None = Header(None),
) -> dict[str, Any]:
    project, _ = await _caller(authorization)
    body = await request.json()

    async def work(conn: Any) -> dict[str, Any]:
        answer = await _cas(review_id, project, body, "sent", conn)
        await conn.execute(
            "INSERT INTO nudges (review_id, seq, project, reason) SELECT $1, coalesce(max(seq), 0) + 1, $2, "
            "'sent' FROM nudges WHERE review_id = $1",
            review_id,
            project,
        )
        return answer | {"closed": True}

    answer = await once(project, idempotency_key, work)
    bells[project].set()
    return answer


async def _unacked(project: str, limit: int) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT review_id, seq, reason FROM nudges WHERE project = $1 AND NOT acked ORDER BY review_id, seq "
        "LIMIT $2",
        project,
        limit,
    )
    return [dict(r) for r in rows]


@app.get("/v1/review-events")
async def list_events(authorization: str = Header(), limit: int = 50) -> dict[str, Any]:
    project, _ = await _caller(authorization)
    return {"events": await _unacked(project, limit)}


@app.get("/v1/review-events/wait")
async def wait(authorization: str = Header(), timeout_s: float = 30, limit: int = 50) -> dict[str, Any]:
    project, _ = await _caller(authorization)
    bell = bells[project]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        bell.clear()
        events = await _unacked(project, limit)
        if events or loop.time() >= deadline:
            return {"events": events}
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(bell.wait(), deadline - loop.time())


@app.post("/v1/review-events/ack")
async def ack(request: Request, authorization: str = Header()) -> dict[str, int]:
    project, _ = await _caller(authorization)
    acks = (await request.json())["acks"]
    async with pool.acquire() as conn, conn.transaction():
        for a in acks:
            await conn.execute(
                "UPDATE nudges SET acked = true WHERE review_id = $1 AND project = $2 AND seq <= $3",
                a["review_id"],
                project,
                a["seq"],
            )
    return {"acked": len(acks)}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
