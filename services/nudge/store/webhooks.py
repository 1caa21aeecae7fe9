"""Webhook queries (issue 19): endpoints, their secret versions, and the delivery queue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Row,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nudge.store.tables import webhook_deliveries, webhook_endpoints, webhook_secrets


@dataclass(frozen=True)
class Endpoint:
    id: str
    org_id: str
    project_id: str
    url: str
    reasons: list[str]
    created_at: datetime


def _endpoint(row: Row[Any]) -> Endpoint:
    return Endpoint(row.id, row.org_id, row.project_id, row.url, list(row.reasons), row.created_at)


async def add_endpoint(conn: AsyncConnection, endpoint: Endpoint) -> None:
    await conn.execute(
        insert(webhook_endpoints).values(
            id=endpoint.id,
            org_id=endpoint.org_id,
            project_id=endpoint.project_id,
            url=endpoint.url,
            reasons=endpoint.reasons,
            created_at=endpoint.created_at,
        )
    )


# Built once: every stored nudge asks for its project's endpoints.
_ENDPOINTS = select(webhook_endpoints).where(webhook_endpoints.c.org_id == bindparam("org_id"))
_ORDER = (webhook_endpoints.c.created_at, webhook_endpoints.c.id)
_ORG_ENDPOINTS = _ENDPOINTS.order_by(*_ORDER)
_PROJECT_ENDPOINTS = _ENDPOINTS.where(webhook_endpoints.c.project_id == bindparam("project_id")).order_by(
    *_ORDER
)


async def endpoints_of(conn: AsyncConnection, org_id: str, project_id: str) -> list[Endpoint]:
    """The endpoints of a project; with ``project_id`` "" (an org-wide broadcast), of every project of the
    org."""
    if project_id:
        rows = await conn.execute(_PROJECT_ENDPOINTS, {"org_id": org_id, "project_id": project_id})
    else:
        rows = await conn.execute(_ORG_ENDPOINTS, {"org_id": org_id})
    return [_endpoint(row) for row in rows]


async def endpoint(conn: AsyncConnection, endpoint_id: str) -> Endpoint | None:
    row = (await conn.execute(select(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id))).first()
    return None if row is None else _endpoint(row)


async def delete_endpoint(conn: AsyncConnection, endpoint_id: str) -> None:
    for table, column in (
        (webhook_deliveries, webhook_deliveries.c.endpoint_id),
        (webhook_secrets, webhook_secrets.c.endpoint_id),
        (webhook_endpoints, webhook_endpoints.c.id),
    ):
        await conn.execute(delete(table).where(column == endpoint_id))


async def add_secret(
    conn: AsyncConnection, endpoint_id: str, version: int, salt: str, key_id: str, now: datetime
) -> None:
    await conn.execute(
        insert(webhook_secrets).values(
            endpoint_id=endpoint_id, version=version, salt=salt, key_id=key_id, created_at=now
        )
    )


async def expire_current_secret(conn: AsyncConnection, endpoint_id: str, expires_at: datetime) -> int:
    """End the current secret's term at ``expires_at``; cut short every older one still in its overlap.
    Returns the current version."""
    current = (
        await conn.execute(
            select(func.max(webhook_secrets.c.version)).where(webhook_secrets.c.endpoint_id == endpoint_id)
        )
    ).scalar_one()
    await conn.execute(
        update(webhook_secrets)
        .where(
            webhook_secrets.c.endpoint_id == endpoint_id,
            webhook_secrets.c.version < current,
            webhook_secrets.c.expires_at > expires_at,
        )
        .values(expires_at=expires_at)
    )
    await conn.execute(
        update(webhook_secrets)
        .where(webhook_secrets.c.endpoint_id == endpoint_id, webhook_secrets.c.version == current)
        .values(expires_at=expires_at)
    )
    return int(current)


async def live_secrets(conn: AsyncConnection, endpoint_id: str, now: datetime) -> list[tuple[int, str, str]]:
    """(version, salt, key_id) of every secret that signs at ``now``, newest first."""
    rows = await conn.execute(
        select(webhook_secrets.c.version, webhook_secrets.c.salt, webhook_secrets.c.key_id)
        .where(
            webhook_secrets.c.endpoint_id == endpoint_id,
            (webhook_secrets.c.expires_at.is_(None)) | (webhook_secrets.c.expires_at > now),
        )
        .order_by(webhook_secrets.c.version.desc())
    )
    return [(int(row.version), str(row.salt), str(row.key_id)) for row in rows]


async def secret_versions(conn: AsyncConnection, endpoint_ids: list[str]) -> dict[str, int]:
    rows = await conn.execute(
        select(webhook_secrets.c.endpoint_id, func.max(webhook_secrets.c.version))
        .where(webhook_secrets.c.endpoint_id.in_(endpoint_ids))
        .group_by(webhook_secrets.c.endpoint_id)
    )
    return {row[0]: int(row[1]) for row in rows}


async def enqueue_deliveries(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    if rows:
        await conn.execute(insert(webhook_deliveries), rows)


async def endpoints_due(conn: AsyncConnection, now: datetime, limit: int) -> list[str]:
    """Up to ``limit`` endpoints whose head delivery (the oldest pending: order) is due now and with no
    live claim, the longest waiting first, so a full sender still gets to every endpoint in turn. Only
    the head counts: an endpoint whose head waits for its retry is not due, whatever queued behind it."""
    heads = (
        select(webhook_deliveries.c.endpoint_id, func.min(webhook_deliveries.c.pos).label("pos"))
        .where(webhook_deliveries.c.status == "pending")
        .group_by(webhook_deliveries.c.endpoint_id)
        .subquery()
    )
    query = (
        select(webhook_deliveries.c.endpoint_id)
        .join(heads, heads.c.pos == webhook_deliveries.c.pos)
        .join(webhook_endpoints, webhook_endpoints.c.id == webhook_deliveries.c.endpoint_id)
        .where(
            webhook_deliveries.c.next_attempt_at <= now,
            (webhook_endpoints.c.lease_until.is_(None)) | (webhook_endpoints.c.lease_until < now),
        )
        .order_by(webhook_deliveries.c.next_attempt_at, webhook_deliveries.c.endpoint_id)
        .limit(limit)
    )
    return [str(row[0]) for row in await conn.execute(query)]


async def claim_endpoint(
    conn: AsyncConnection, endpoint_id: str, now: datetime, until: datetime | None
) -> bool:
    """Take (``until`` a time) or give back (None) an endpoint's delivery claim; CAS on the lease."""
    query = update(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id)
    if until is not None:
        query = query.where(
            (webhook_endpoints.c.lease_until.is_(None)) | (webhook_endpoints.c.lease_until < now)
        )
    result = await conn.execute(query.values(lease_until=until))
    return bool(result.rowcount == 1)


async def head_delivery(conn: AsyncConnection, endpoint_id: str) -> Row[Any] | None:
    """The endpoint's oldest pending delivery: deliveries to one endpoint go in order."""
    query = (
        select(webhook_deliveries)
        .where(webhook_deliveries.c.endpoint_id == endpoint_id, webhook_deliveries.c.status == "pending")
        .order_by(webhook_deliveries.c.pos)
        .limit(1)
    )
    return (await conn.execute(query)).first()


async def record_attempt(conn: AsyncConnection, pos: int, **values: Any) -> None:
    await conn.execute(update(webhook_deliveries).where(webhook_deliveries.c.pos == pos).values(**values))


async def prune_deliveries(conn: AsyncConnection, finished_before: datetime) -> int:
    """Forget delivered and failed deliveries finished before ``finished_before`` (pending ones stay)."""
    result = await conn.execute(
        delete(webhook_deliveries).where(
            webhook_deliveries.c.status != "pending", webhook_deliveries.c.finished_at < finished_before
        )
    )
    return int(result.rowcount or 0)


async def deliveries_of(conn: AsyncConnection, endpoint_id: str, status: str, limit: int) -> list[Row[Any]]:
    query = select(webhook_deliveries).where(webhook_deliveries.c.endpoint_id == endpoint_id)
    if status:
        query = query.where(webhook_deliveries.c.status == status)
    return list(await conn.execute(query.order_by(webhook_deliveries.c.pos.desc()).limit(limit)))
