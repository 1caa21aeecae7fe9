"""A gateway that dies mid-request leaves its Idempotency-Key claim pending; after the lease a retry
with the same key runs the mutation, exactly once, instead of ``409 still running`` forever."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from gateway import store
from reviewloop.storage.schema import utcnow
from sqlalchemy import update

from tests.conftest import Databases
from tests.gateway.inprocess import ADMIN, gateway

LEASE_S = 30.0
HEADERS = {"Authorization": f"Bearer {ADMIN}", "Idempotency-Key": "create-acme"}


async def test_a_claim_left_pending_by_a_dead_gateway_expires_after_its_lease(
    databases: Databases, backend: str, tmp_path: Path
) -> None:
    url = await databases.url(backend, "gateway")
    async with gateway(url, tmp_path, idempotency_lease_s=LEASE_S) as (app, client):
        first = await client.post("/v1/admin/projects", json={"name": "acme"}, headers=HEADERS)
        assert first.status_code == 201

        async def plant(age_s: float) -> None:
            """The row as a gateway killed after the mutation, before it recorded the answer, left it."""
            async with app.state.db.transaction() as uow:
                await uow.conn.execute(
                    update(store.idempotency_keys).values(
                        status=store.PENDING, response="", created_at=utcnow() - timedelta(seconds=age_s)
                    )
                )

        await plant(LEASE_S / 2)  # the request may still be running on another replica: not yet
        held = await client.post("/v1/admin/projects", json={"name": "acme"}, headers=HEADERS)
        assert (held.status_code, held.json()["code"]) == (409, "conflict")
        assert "still running" in held.json()["detail"]

        await plant(LEASE_S + 1)
        retries = await asyncio.gather(
            *(client.post("/v1/admin/projects", json={"name": "acme"}, headers=HEADERS) for _ in range(4))
        )
        ran = [r for r in retries if r.status_code == 201 and "idempotent-replayed" not in r.headers]
        assert len(ran) == 1, [(r.status_code, r.text) for r in retries]  # one retry took the claim over
        assert all(r.status_code in (201, 409) for r in retries)
        again = await client.post("/v1/admin/projects", json={"name": "acme"}, headers=HEADERS)
        assert again.headers["idempotent-replayed"] == "true" and again.json() == ran[0].json()

        await plant(LEASE_S + 1)  # a different request under the same key is still refused
        other = await client.post("/v1/admin/projects", json={"name": "globex"}, headers=HEADERS)
        assert (other.status_code, other.json()["code"]) == (409, "idempotency_conflict")
