"""Idempotency-Key: run a mutation once per (project, actor, key); a retry gets the first answer.

A retry with the same body replays the first result; the same key with another body is
``idempotency_conflict``. The key is remembered in the mutation's own transaction, so a crash leaves
either both or neither. Each store adds the table with ``idempotency_table(metadata, *extra)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

import orjson
from sqlalchemy import (
    Column,
    DateTime,
    MetaData,
    PrimaryKeyConstraint,
    Row,
    Select,
    String,
    Table,
    bindparam,
    select,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from reviewloop.errors import Code, DomainError
from reviewloop.storage.engine import Database, UnitOfWork
from reviewloop.storage.schema import utcnow

T = TypeVar("T")


def idempotency_table(metadata: MetaData, *extra: Column[Any]) -> Table:
    """The ``idempotency_keys`` table on ``metadata``, with a store's ``extra`` result columns."""
    return Table(
        "idempotency_keys",
        metadata,
        Column("project_id", String(40), nullable=False),
        Column("actor_id", String(40), nullable=False),
        Column("key", String(255), nullable=False),
        Column("request_hash", String(64), nullable=False),
        *extra,
        Column("created_at", DateTime(timezone=True), nullable=False),
        PrimaryKeyConstraint("project_id", "actor_id", "key"),
    )


@cache
def _read(table: Table) -> Select[Any]:
    """``table``'s read of one key, built once per table: a keyed mutation then walks no cache key."""
    return select(table).where(
        table.c.project_id == bindparam("project_id"),
        table.c.actor_id == bindparam("actor_id"),
        table.c.key == bindparam("key"),
    )


def request_hash(fields: Mapping[str, Any]) -> str:
    """A stable hash of a request's fields (key order does not matter)."""
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def seen(
    conn: AsyncConnection, table: Table, project_id: str, actor_id: str, key: str, fields_hash: str
) -> Row[Any] | None:
    """The row remembered for this key, or None; another body under the key is a conflict.

    Raises:
        DomainError: ``idempotency_conflict`` when the key was used with a different body.
    """
    row = (
        await conn.execute(_read(table), {"project_id": project_id, "actor_id": actor_id, "key": key})
    ).first()
    return row if row is not None and is_replay(row.request_hash, fields_hash) else None


class Replayed(Exception):
    """Raised by a mutation that found its own key remembered, read with its first statement's rows.

    ``once`` answers with ``result`` as the replay, and nothing is written (see ``is_replay``).
    """

    def __init__(self, result: Any) -> None:
        super().__init__("replayed")
        self.result = result


def is_replay(stored_hash: str | None, fields_hash: str) -> bool:
    """Whether a remembered key (its ``request_hash``; None: never used) is this request's retry.

    For a store that reads the key's row together with other rows, in one statement.

    Raises:
        DomainError: ``idempotency_conflict`` when the key was used with a different body.
    """
    if stored_hash is None:
        return False
    if stored_hash != fields_hash:
        raise DomainError(
            Code.IDEMPOTENCY_CONFLICT,
            "This Idempotency-Key was already used with a different request body; "
            "use a new key for a new request.",
        )
    return True


@dataclass(frozen=True)
class Request:
    """A keyed request's identity: who asked, with which Idempotency-Key, and its body."""

    project_id: str  # the caller's project; keys are scoped to it and to ``actor_id``
    actor_id: str  # the caller
    key: str  # the Idempotency-Key; empty runs the mutation with no memory
    fields: Mapping[str, Any]  # the request, hashed to tell a retry from a different request


async def once(
    db: Database,
    table: Table,
    request: Request,
    act: Callable[[UnitOfWork], Awaitable[T]],
    record: Callable[[T], Mapping[str, Any]],
    replay: Callable[[AsyncConnection, Row[Any]], Awaitable[T]],
    *,
    checked: bool = False,
) -> tuple[T, bool]:
    """Run ``act`` in one unit of work, at most once per Idempotency-Key.

    Args:
        db: the store the key and the mutation share.
        table: the store's ``idempotency_table``.
        request: who asked, the key, and the body.
        act: the mutation; its result is remembered through ``record``.
        record: the extra columns that remember ``act``'s result.
        replay: rebuilds the result from the remembered row, in the replaying transaction.
        checked: the key is read elsewhere, so the unit of work does not read it first: by the caller
            moments ago (``seen``, which found none), or by ``act`` with its own first statement (raising
            ``Replayed`` when it is remembered). A twin that remembers it after that read fails this
            call's insert, or its ``act`` (the compare-and-set the twin moved), and either way its
            answer is replayed.

    Returns:
        The result, and whether it was replayed.

    Raises:
        DomainError: ``idempotency_conflict`` for the key with another body; ``conflict`` when a
            concurrent twin holds the key twice in a row.
    """
    if not request.key:
        async with db.transaction() as uow:
            return await act(uow), False
    fields_hash = request_hash(request.fields)
    who = (request.project_id, request.actor_id, request.key)
    for attempt in range(2):  # a concurrent twin may win the key's insert; the second pass then reads it
        read = not checked or attempt > 0
        try:
            async with db.transaction() as uow:
                if read:
                    row = await seen(uow.conn, table, *who, fields_hash)
                    if row is not None:
                        return await replay(uow.conn, row), True
                result = await act(uow)
                uow.insert(table, _remembered(request, fields_hash, record(result)))
                return result, False
        except Replayed as replayed:
            return replayed.result, True
        except IntegrityError:
            continue
        except DomainError as refusal:
            if read:
                raise
            async with db.single_statement.connect() as conn:  # the refusal may be a twin's doing
                row = await seen(conn, table, *who, fields_hash)
                if row is None:
                    raise refusal from None
                return await replay(conn, row), True
    raise DomainError(Code.CONFLICT, "A concurrent request with this Idempotency-Key is in flight; retry.")


def _remembered(request: Request, fields_hash: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The key's row: written with the unit's last rows, so a twin's key fails them all."""
    return {
        "project_id": request.project_id,
        "actor_id": request.actor_id,
        "key": request.key,
        "request_hash": fields_hash,
        "created_at": utcnow(),
        **result,
    }
