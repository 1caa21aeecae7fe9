"""One vocabulary per enum across the wire: the nudge reasons are the payloads of ``NudgeRequested``'s
oneof. The pure domains cannot import protobuf (their allow-list), so their enums are held to it here; the
libraries derive theirs from the descriptor (``reviewloop.protoconv.oneof_names``)."""

from __future__ import annotations

import typing

from nudge.domain import reasons, webhooks
from review_state.domain import machine
from reviewloop import shapes
from reviewloop.protoconv import optional_scalars
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes.events import NUDGE_REASONS


def test_the_nudge_reasons_are_the_oneofs_on_both_sides_of_the_outbox() -> None:
    assert NUDGE_REASONS[0] == "redraft_requested" and "front_run_next" in NUDGE_REASONS
    assert tuple(reason.value for reason in machine.Reason) == NUDGE_REASONS
    assert {reason.value for reason in reasons.Reason if reason not in reasons.RESERVED} == set(NUDGE_REASONS)
    description = shapes.ReviewEvent.model_fields["reason"].description or ""
    assert description.split(" (")[0].split(" | ") == list(NUDGE_REASONS)


def test_a_webhook_names_a_nudge_reason_or_a_notice_for_humans() -> None:
    published = set(typing.get_args(shapes.push.WebhookReason))
    assert published == webhooks.EVENT_TYPES == set(NUDGE_REASONS) | webhooks.FOR_HUMANS


def test_the_reviews_optional_fields_are_read_off_the_descriptor() -> None:
    names = optional_scalars(review_pb2.Review.DESCRIPTOR)
    assert {"message_id", "body_html", "confidence", "rfc_message_id"} <= set(names)
    assert "intent" not in names and "subject" not in names  # a message field; a plain scalar
