"""An intent's ``meta`` travels as ``Intent.meta`` (a Struct) and, for a peer of contract 0.1.0-pre.6 or
earlier, as ``meta_json`` beside it: each side reads either, so a rolling upgrade loses no intent."""

from __future__ import annotations

import orjson
from gateway.translate.reviews import as_review, set_intent
from review_state.messages import intent_from_proto
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import ReviewIntent

META = {"goal": "book_meeting", "touches": 2, "tags": ["a", None, True, 1.5], "deep": {"n": -(2**53)}}


def test_the_gateway_writes_both_and_review_state_reads_the_struct() -> None:
    intent = review_pb2.Intent()
    set_intent(intent, ReviewIntent(summary="Re-engage Acme about Q3", meta=META))
    assert intent.HasField("meta") and orjson.loads(intent.meta_json) == META
    read = intent_from_proto(intent, has=True)
    assert read is not None and read.meta == META
    intent.meta_json = '{"stale": true}'  # the Struct wins where both are sent
    read = intent_from_proto(intent, has=True)
    assert read is not None and read.meta == META


def test_an_earlier_peer_that_sends_only_meta_json_is_read_on_both_sides() -> None:
    earlier = review_pb2.Intent(summary="Re-engage Acme about Q3", meta_json=orjson.dumps(META).decode())
    read = intent_from_proto(earlier, has=True)
    assert read is not None and read.meta == META
    review = review_pb2.Review(id="rr_1", kind=1, state=1, intent=earlier)
    assert as_review(review)["intent"] == {"summary": "Re-engage Acme about Q3", "meta": META}


def test_no_meta_is_absent_not_empty() -> None:
    intent = review_pb2.Intent()
    set_intent(intent, ReviewIntent(summary="Re-engage Acme about Q3"))
    assert not intent.HasField("meta") and intent.meta_json == ""
    read = intent_from_proto(intent, has=True)
    assert read is not None and read.meta is None
    assert "meta" not in as_review(review_pb2.Review(id="rr_1", kind=1, state=1, intent=intent))["intent"]
