"""The diff store through its use cases, on SQLite and PostgreSQL: stored once, never overwritten."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
import pytest
from diff import app
from diff.__main__ import SPEC
from diff.domain.fields import MAX_FIELD_BYTES, Attachment, MessageFields
from diff.server import diff_to_proto
from diff.store import DiffKey, StoredDiff
from reviewloop.common.v1 import common_pb2
from reviewloop.diff.v1.diff_pb2 import DiffCommitted
from reviewloop.errors import Code, DomainError
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, codec
from reviewloop.storage.inbox import Ingested, ingest_each

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
KEY = DiffKey("prj_1", "rr_diff1", 1, 2)
PROPOSED = MessageFields(subject="Q3 pilot", body_text="Let me know your thoughts.", to=("vp@acme.com",))
SENT = MessageFields(subject="Q3 pilot", body_text="Can you do Thursday 2pm?", to=("vp@acme.com",))


async def test_recompute_with_the_same_inputs_returns_the_stored_row(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    first = await app.compute_diff(db, KEY, PROPOSED, SENT)
    again = await app.compute_diff(db, KEY, PROPOSED, SENT)
    assert again == first  # created_at included: the row was read back, not written again
    assert first.fields_changed == ("body_text",)
    assert orjson.loads(first.diff_json)["hunks"][0]["after"] == "Can you do Thursday 2pm?"
    assert await app.get_diff(db, KEY) == first


async def test_different_inputs_for_a_stored_key_are_refused_and_nothing_is_overwritten(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    stored = await app.compute_diff(db, KEY, PROPOSED, SENT)
    other = MessageFields(subject="Q3 pilot", body_text="Does Friday work?", to=("vp@acme.com",))
    with pytest.raises(DomainError) as refused:
        await app.compute_diff(db, KEY, PROPOSED, other)
    assert refused.value.code is Code.CONFLICT
    assert ("input_sha256", stored.input_sha256) in refused.value.hints
    assert await app.get_diff(db, KEY) == stored


async def test_the_same_inputs_under_another_key_are_their_own_row(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    first = await app.compute_diff(db, KEY, PROPOSED, SENT)
    second = await app.compute_diff(db, DiffKey("prj_1", "rr_diff1", 2, 3), PROPOSED, SENT)
    assert second.input_sha256 == first.input_sha256  # the content address is the inputs'
    assert second.key != first.key


async def test_concurrent_computes_of_one_key_store_one_row(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    rivals = [
        MessageFields(subject="Q3 pilot", body_text=f"Edit number {n}.", to=("vp@acme.com",))
        for n in range(4)
    ]
    outcomes = await asyncio.gather(
        *(app.compute_diff(db, KEY, PROPOSED, after) for after in rivals + rivals), return_exceptions=True
    )
    stored = await app.get_diff(db, KEY)
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, BaseException)]
    assert winners and all(w == stored for w in winners)
    assert all(isinstance(e, DomainError) and e.code is Code.CONFLICT for e in losers)
    assert len(winners) == 2  # the winning input, computed twice, returns the same row both times


async def test_a_field_over_2_mib_is_refused_and_nothing_is_stored(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    huge = MessageFields(body_text="é" * (MAX_FIELD_BYTES // 2 + 1))  # 2 bytes each in UTF-8
    with pytest.raises(DomainError) as refused:
        await app.compute_diff(db, KEY, PROPOSED, huge)
    assert refused.value.code is Code.BAD_REQUEST
    assert refused.value.violations[0].field == "/after/body_text"
    assert "2 MiB" in refused.value.detail and str(MAX_FIELD_BYTES + 2) in refused.value.detail
    with pytest.raises(DomainError) as missing:
        await app.get_diff(db, KEY)
    assert missing.value.code is Code.NOT_FOUND


async def test_exactly_2_mib_is_diffed(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    line = "x" * 1023 + "\n"
    big = line * (MAX_FIELD_BYTES // len(line))
    after = MessageFields(body_text=big.replace(line, "y" * 1023 + "\n", 1))
    stored = await app.compute_diff(db, KEY, MessageFields(body_text=big), after)
    assert stored.fields_changed == ("body_text",)
    assert len(orjson.loads(stored.diff_json)["hunks"]) == 1


@pytest.mark.parametrize(
    ("key", "pointer"),
    [
        (DiffKey("prj_1", "", 1, 2), "/review_id"),
        (DiffKey("prj_1", "rr_" + "x" * 70, 1, 2), "/review_id"),
        (DiffKey("prj_1", "rr_1", 0, 2), "/from_revision"),
        (DiffKey("prj_1", "rr_1", 3, 2), "/to_revision"),
    ],
)
async def test_bad_keys_are_refused(open_db: OpenDb, key: DiffKey, pointer: str) -> None:
    db = await open_db(SPEC)
    with pytest.raises(DomainError) as refused:
        await app.compute_diff(db, key, PROPOSED, SENT)
    assert refused.value.code is Code.BAD_REQUEST
    assert refused.value.violations[0].field == pointer


async def test_an_attachment_hash_must_be_a_sha256(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    after = MessageFields(attachments=(Attachment("a.pdf", "application/pdf", "ABC"),))
    with pytest.raises(DomainError) as refused:
        await app.compute_diff(db, KEY, PROPOSED, after)
    assert refused.value.violations[0].field == "/after/attachments/0/content_sha256"


async def test_a_dry_run_stores_nothing_and_a_committed_diff_is_stored_once_never_overwritten(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    other = MessageFields(subject="Q3 pilot", body_text="Does Friday work?", to=("vp@acme.com",))
    lost = await app.compute_diff(db, KEY, PROPOSED, other, dry_run=True)  # a loser's diff
    won = await app.compute_diff(db, KEY, PROPOSED, SENT, dry_run=True)
    with pytest.raises(DomainError) as absent:
        await app.get_diff(db, KEY)
    assert absent.value.code is Code.NOT_FOUND

    def committed(diff: StoredDiff, event_id: str) -> common_pb2.Event:
        proto = diff_to_proto(diff)
        principal = common_pb2.Principal(
            org_id="org_1", project_id="prj_1", actor_kind=common_pb2.ACTOR_KIND_HUMAN, actor_id="key_1"
        )
        message = DiffCommitted(principal=principal, diff=proto)
        return common_pb2.Event(
            event_id=event_id, type="diff_committed", payload=codec.encode(message).encode()
        )

    event = committed(won, "evt_1")
    assert await ingest_each(db, [event, event, committed(lost, "evt_2")], app.SUBSCRIPTIONS) == Ingested(
        2, 1
    )
    stored = await app.get_diff(db, KEY)
    assert (stored.input_sha256, stored.diff_json) == (won.input_sha256, won.diff_json)
