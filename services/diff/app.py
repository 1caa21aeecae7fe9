"""diff use cases: compute (or return the stored) diff, compute one without storing it (``dry_run``),
store a committed one (``diff_committed`` from review_state's outbox), read a stored diff.

The diff is computed outside any transaction (a 2 MiB body must not hold SQLite's write lock), then
stored in one transaction. Rows are never overwritten: the key's first inputs win, and a different
input for a taken key is refused with ``conflict``. review_state dry-runs an edit's diff and stores it
only once the edit committed, so a writer that lost the review's compare-and-set leaves no row that
would refuse the winner (or a later edit) of that revision pair.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from reviewloop.diff.v1.diff_pb2 import DiffCommitted
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.storage import Database, UnitOfWork, utcnow
from reviewloop.storage.inbox import Subscription
from reviewloop.telemetry import tracer
from reviewloop.tenancy import Principal

from diff import store
from diff.domain.fields import MAX_FIELD_BYTES, MessageFields, input_sha256, oversize
from diff.domain.message import compute
from diff.domain.words import Segment, word_diff
from diff.store import DiffKey, StoredDiff

log = logging.getLogger(__name__)

REVIEW_ID_MAX = 64
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Inputs larger than this are diffed on a worker thread, so one big diff does not stall every other
# request (health checks included) on the event loop.
OFFLOAD_BYTES = 64 * 1024


def _check_key(key: DiffKey) -> None:
    if not key.review_id:
        raise invalid("/review_id", "is required: name the review whose revisions are diffed.")
    if len(key.review_id) > REVIEW_ID_MAX:
        raise invalid("/review_id", f"is longer than {REVIEW_ID_MAX} characters; pass the review's id.")
    if key.from_revision < 1 or key.to_revision < 1:
        raise invalid("/from_revision", "from_revision and to_revision are required and count from 1.")
    if key.from_revision > key.to_revision:
        raise invalid("/to_revision", "must not be lower than from_revision: a diff reads older -> newer.")


def _check_fields(before: MessageFields, after: MessageFields) -> None:
    over = oversize(before, after)
    if over is not None:
        raise invalid(
            f"/{over.side}/{over.field}",
            f"is {over.size} bytes; at most {MAX_FIELD_BYTES} bytes (2 MiB) per field are diffed. "
            "Nothing was stored.",
        )
    for side, fields in (("before", before), ("after", after)):
        for index, attachment in enumerate(fields.attachments):
            if not _SHA256.fullmatch(attachment.content_sha256):
                raise invalid(
                    f"/{side}/attachments/{index}/content_sha256",
                    "must be the lowercase hex SHA-256 of the attachment's content (64 characters).",
                )


def _same_or_conflict(stored: StoredDiff, address: str) -> StoredDiff:
    if stored.input_sha256 == address:
        return stored
    key = stored.key
    raise DomainError(
        Code.CONFLICT,
        f"A diff of review {key.review_id} revisions {key.from_revision} -> {key.to_revision} is already "
        "stored from different inputs, and stored diffs are never overwritten; diff the revisions "
        "as they were stored, or name a new revision pair.",
        revision=key.to_revision,
        hints=(("input_sha256", stored.input_sha256),),
    )


def _size(fields: MessageFields) -> int:
    return len(fields.subject) + len(fields.body_text) + len(fields.body_html)


async def compute_diff(
    db: Database, key: DiffKey, before: MessageFields, after: MessageFields, *, dry_run: bool = False
) -> StoredDiff:
    """The diff of ``before`` -> ``after`` stored under ``key``: computed and stored on first call,
    read back on every same-input call. ``dry_run`` computes it and neither reads nor stores a row.
    Raises ``bad_request`` (bad key, a field over 2 MiB, a bad attachment hash; nothing stored) and
    ``conflict`` (the key holds a diff of other inputs; never on a dry run)."""
    _check_key(key)
    _check_fields(before, after)
    address = input_sha256(before, after)
    if not dry_run:
        async with db.engine.connect() as conn:
            stored = await store.get_diff(conn, key)
        if stored is not None:
            return _same_or_conflict(stored, address)
    with tracer.start_as_current_span(
        "diff.compute",
        attributes={"reviewloop.review_id": key.review_id, "input_chars": _size(before) + _size(after)},
    ) as span:
        if _size(before) + _size(after) > OFFLOAD_BYTES:
            result = await asyncio.to_thread(compute, before, after)
        else:
            result = compute(before, after)
        span.set_attribute("fields_changed", list(result.fields_changed))
    candidate = StoredDiff(
        key=key,
        input_sha256=address,
        fields_changed=result.fields_changed,
        diff_unified=result.diff_unified,
        diff_json=result.diff_json,
        created_at=utcnow(),
    )
    if dry_run:
        return candidate
    async with db.transaction() as uow:
        if await store.add_diff(uow.conn, candidate):
            return candidate
        stored = await store.get_diff(uow.conn, key)
    # A concurrent call stored this key between our read and our insert.
    assert stored is not None  # rows are never deleted
    return _same_or_conflict(stored, address)


async def get_diff(db: Database, key: DiffKey) -> StoredDiff:
    """The stored diff under ``key``. Raises ``not_found`` when none was computed."""
    _check_key(key)
    async with db.engine.connect() as conn:
        stored = await store.get_diff(conn, key)
    if stored is None:
        raise DomainError(
            Code.NOT_FOUND,
            f"No diff of review {key.review_id} revisions {key.from_revision} -> {key.to_revision} "
            "was computed.",
        )
    return stored


async def store_committed(uow: UnitOfWork, event: DiffCommitted) -> None:
    """Store the diff of a revision pair a review committed to (review_state's outbox, once per event).
    A key already holding other inputs keeps them: a row is never overwritten, and refusing the event
    would only hold back the review's later ones."""
    diff = event.diff
    key = DiffKey(
        Principal.from_proto(event.principal).project_id, diff.review_id, diff.from_revision, diff.to_revision
    )
    committed = StoredDiff(
        key=key,
        input_sha256=diff.input_sha256,
        fields_changed=tuple(diff.fields_changed),
        diff_unified=diff.diff_unified,
        diff_json=diff.diff_json,
        created_at=utcnow(),
    )
    if not await store.add_diff(uow.conn, committed):
        stored = await store.get_diff(uow.conn, key)
        if stored is not None and stored.input_sha256 != committed.input_sha256:
            log.warning("kept the stored diff of %s (other inputs than the committed one)", key)


# What the Ingest RPC subscribes to (``reviewloop.service.ingest``).
SUBSCRIPTIONS: dict[str, Subscription[Any]] = {"diff_committed": Subscription(DiffCommitted, store_committed)}


async def diff_words(before: str, after: str) -> list[Segment]:
    """The word-level diff of two texts (nothing is stored); a large pair is diffed on a worker thread."""
    for side, text in (("before", before), ("after", after)):
        if len(text.encode()) > MAX_FIELD_BYTES:
            raise invalid(f"/{side}", f"is over the {MAX_FIELD_BYTES} byte bound of a diffed text")
    if len(before) + len(after) > OFFLOAD_BYTES:
        return await asyncio.to_thread(word_diff, before, after)
    return word_diff(before, after)
