"""The agent plane's nudges: drain, long-poll and ack them (a stream of them is the client's ``stream``)."""

from __future__ import annotations

from collections.abc import Sequence

from reviewloop.client.call import Call, drop_none, shaped, verb
from reviewloop.shapes import AckReviewEventResult, ReviewEventsResult

TERMINAL_REASONS = frozenset({"sent", "send_failed", "cancelled", "front_run_next"})
"""Nudge reasons after which a review produces nothing more for its composer (spec 000, terminal events)."""


class EventVerbs:
    """Draining, waiting for and acking the caller's nudges."""

    @verb
    @staticmethod
    def list_review_events(
        *, limit: int | None = None, cursor: str | None = None, review_id: str | None = None
    ) -> Call[ReviewEventsResult]:
        """Drain the caller's un-acked nudges, oldest first (``GET /v1/review-events``).

        A nudge keeps re-surfacing until :meth:`ack_review_events` acks it. Handle every ``reason`` and ack
        and ignore the ones this agent does not know: the enum grows across 0.x. A broadcast (``seq`` 0,
        no ``review_id``) tells of a project-wide rule or category change; ack it by ``broadcast_ids``.

        Args:
            limit: Page size (1..200; the server's default is 50).
            cursor: The ``next_cursor`` of the previous page.
            review_id: Only this review's nudges (no broadcasts).

        Returns:
            A :class:`ReviewEventsResult`; its ``next_cursor`` is ``None`` on the last page, and ``cursors``
            holds the ack frontier (``last_acked_seq``) of each review on the page, and of ``review_id``.
        """
        params = drop_none(dict(limit=limit, cursor=cursor, review_id=review_id))
        return Call("GET", "/v1/review-events", shaped(ReviewEventsResult), params=params)

    @verb
    @staticmethod
    def wait_for_review_event(
        *, timeout_s: float = 30.0, limit: int | None = None, review_id: str | None = None
    ) -> Call[ReviewEventsResult]:
        """Long-poll for the caller's next un-acked nudges (``GET /v1/review-events/wait``).

        Answers as soon as a nudge is visible, or with no events once ``timeout_s`` has passed; the HTTP
        read timeout is set past it.

        Args:
            timeout_s: How long the server may hold the request (clamped to 1..55 s).
            limit: The most events answered (1..200; the server's default is 50).
            review_id: Wait for this review's nudges only (no broadcasts).

        Returns:
            A :class:`ReviewEventsResult`, empty when nothing arrived in time; ``cursors`` holds each
            answered review's ack frontier (``last_acked_seq``).
        """
        params = drop_none(dict(wait_seconds=timeout_s, limit=limit, review_id=review_id))
        # The server holds the request up to timeout_s: read for longer than that.
        return Call(
            "GET",
            "/v1/review-events/wait",
            shaped(ReviewEventsResult),
            params=params,
            timeout_s=timeout_s + 10,
        )

    @verb
    @staticmethod
    def ack_review_events(
        acks: Sequence[tuple[str, int]] = (),
        *,
        broadcast_ids: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> Call[AckReviewEventResult]:
        """Advance each review's ack cursor, and mark broadcasts done (``POST /v1/review-events/ack``).

        Idempotent, never backwards, all or nothing. An acked nudge never re-surfaces, so ack a terminal
        nudge only once its outcome is recorded. A broadcast (``seq`` 0, no ``review_id``: a project-wide
        rule or category change) is acked by its ``id``, for this key only.

        Args:
            acks: ``(review_id, through_seq)`` pairs: every nudge of that review up to ``through_seq`` is
                acked.
            broadcast_ids: The ``id`` of each broadcast this key is done with.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.

        Returns:
            An :class:`AckReviewEventResult`; ``acked`` counts the acks and broadcast ids taken, a repeated
            one included, and ``cursors`` where each acked review's cursor now stands.

        Raises:
            ReviewloopError: ``bad_request`` for more than 100 acks or broadcast ids, or a ``seq`` past
                the review's newest nudge (nothing is acked); ``404 not_found`` for a review or broadcast
                the caller cannot see.
        """
        body = {
            "acks": [{"review_id": review_id, "through_seq": seq} for review_id, seq in acks],
            "broadcast_ids": list(broadcast_ids),
        }
        return Call(
            "POST", "/v1/review-events/ack", shaped(AckReviewEventResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    # The skill catalog's name for the same verb.
    ack_review_event = ack_review_events
