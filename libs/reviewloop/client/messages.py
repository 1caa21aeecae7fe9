"""The agent plane's sends: a message, a reply, a forward, and what decides their fate.

What decides it: the project's review policy and the risk dial, both read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reviewloop.client.call import Call, Json, drop_none, quoted, raw, shaped, verb
from reviewloop.shapes import RiskDial, SubmitForReviewResult


class MessageVerbs:
    """The composer's sends, and the policy reads that decide what happens to them."""

    @verb
    @staticmethod
    def send_email(
        *,
        to: Sequence[str],
        subject: str,
        body_text: str,
        intent: Json | None = None,
        cc: Sequence[str] = (),
        bcc: Sequence[str] = (),
        category_id: str | None = None,
        composition_token: str | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> Call[SubmitForReviewResult]:
        """Submit a new outbound message (``POST /v1/messages``).

        The project's review policy decides what happens to it: under ``require_review`` a human decides;
        under ``allow_direct`` a call without ``intent`` is released at once. Either way a review row is
        created, and its terminal nudge reports the outcome.

        Args:
            to: The recipients.
            subject: The subject line.
            body_text: The plain-text body.
            intent: The summary for the human reviewer, ``{"summary": ..., "meta": {...}}``; required
                whenever the resolved mode is review.
            cc: Carbon-copy recipients.
            bcc: Blind-copy recipients.
            category_id: The ``cat_`` id the draft was matched to.
            composition_token: The token of the unfiltered :meth:`get_rules` snapshot the draft was
                composed against.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **extra: Further request fields (``body_html``, ``reply_to``, ``headers``, ``attachments``,
                ``confidence``, ``mode`` (``review`` | ``direct``: the policy may turn direct into review),
                ``inbox`` (the From address), ...), sent as given.

        Returns:
            A :class:`SubmitForReviewResult` (``202``) with the ``review_id`` to come back to: ``status`` is
            ``queued_for_review``, or ``sent`` when the policy released the message at once.

        Raises:
            ReviewloopError: ``422 intent_required`` when the resolved mode is review and no ``intent``
                was given (nothing sent, nothing queued); before that gate, ``403 recipient_blocked``,
                ``422 recipient_suppressed`` or ``403 quota_exceeded``, which an intent would not fix;
                ``409 born_stale`` when ``composition_token`` predates the current rules (``get_rules``
                again), ``bad_request`` when it has expired; ``409 idempotency_conflict`` when
                ``idempotency_key`` was used with a different body.
        """
        body = drop_none(
            dict(
                to=list(to),
                cc=list(cc) or None,
                bcc=list(bcc) or None,
                subject=subject,
                text=body_text,  # the SDK's request name (the server also reads body_text)
                intent=intent,
                category_id=category_id,
                composition_token=composition_token,
                **extra,
            )
        )
        return Call(
            "POST", "/v1/messages", shaped(SubmitForReviewResult), body=body, idempotency_key=idempotency_key
        )

    @verb
    @staticmethod
    def reply_to_email(
        message_id: str,
        *,
        body_text: str,
        intent: Json | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> Call[SubmitForReviewResult]:
        """Reply to a recorded message (``POST /v1/messages/{message_id}/reply``).

        The ``Re:`` subject and the recipients are materialized at submit, so the reviewer sees the exact
        bytes that will be delivered. The review policy applies as for :meth:`send_email`.

        Args:
            message_id: The message replied to.
            body_text: The plain-text body of the reply.
            intent: The summary for the human reviewer; required whenever the resolved mode is review.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **extra: Further request fields (``composition_token``, ``cc``, ``body_html``, ``mode``,
                ``inbox``, ``thread_id``, ``reply_all``, ``expected_context_version``,
                ``expected_last_message_id``, ``second_reply``, ...), sent as given.

        Returns:
            A :class:`SubmitForReviewResult` (``202``) with the ``review_id`` to come back to: ``status`` is
            ``queued_for_review``, or ``sent`` when the policy released the message at once.

        Raises:
            ReviewloopError: ``404 not_found`` for a message this project does not hold; ``409
                reply_context_changed`` when the thread moved past ``expected_context_version`` /
                ``expected_last_message_id`` (re-read it and recompose; nothing was queued); ``409
                reply_already_pending`` when the thread already has a reply pending (its ``review_id`` is
                in the problem; ``second_reply=True`` says you mean another); otherwise as
                :meth:`send_email`.
        """
        body = drop_none(dict(text=body_text, intent=intent, **extra))
        return Call(
            "POST", f"/v1/messages/{quoted(message_id)}/reply", shaped(SubmitForReviewResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def reply_to_thread(
        thread_id: str,
        *,
        body_text: str,
        intent: Json | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> Call[SubmitForReviewResult]:
        """Reply to a thread's newest message (``POST /v1/threads/{thread_id}/reply``).

        Args:
            thread_id: The ``thread_`` id (a review's ``thread_ref``).
            body_text: The plain-text body of the reply.
            intent: The summary for the human reviewer; required whenever the resolved mode is review.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **extra: Further request fields, as for :meth:`reply_to_email`.

        Returns:
            A :class:`SubmitForReviewResult` (``202``), as for :meth:`reply_to_email`.

        Raises:
            ReviewloopError: ``404 not_found`` for a thread this project does not hold; otherwise as
                :meth:`reply_to_email`.
        """
        body = drop_none(dict(text=body_text, intent=intent, **extra))
        return Call(
            "POST", f"/v1/threads/{quoted(thread_id)}/reply", shaped(SubmitForReviewResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def forward_email(
        message_id: str,
        *,
        to: Sequence[str],
        body_text: str = "",
        intent: Json | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> Call[SubmitForReviewResult]:
        """Forward a recorded message to new recipients (``POST /v1/messages/{message_id}/forward``).

        A forward goes through review like any send: the quoted parent is part of the reviewed body, and
        the delivered message is not threaded to its parent.

        Args:
            message_id: The message forwarded.
            to: The new recipients.
            body_text: The text placed above the quoted parent.
            intent: The summary for the human reviewer; required whenever the resolved mode is review.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **extra: Further request fields (``composition_token``, ``subject``, ...), sent as given.

        Returns:
            A :class:`SubmitForReviewResult` (``202``) with the ``review_id`` to come back to: ``status`` is
            ``queued_for_review``, or ``sent`` when the policy released the message at once.

        Raises:
            ReviewloopError: ``404 not_found`` for a message this project does not hold; otherwise as
                :meth:`send_email`.
        """
        body = drop_none(dict(to=list(to), text=body_text, intent=intent, **extra))
        return Call(
            "POST", f"/v1/messages/{quoted(message_id)}/forward", shaped(SubmitForReviewResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def get_effective_review_policy() -> Call[Json]:
        """Read the project's resolved review policy before sending (``GET /v1/review-policy``).

        Returns:
            ``{"policy", "source"}``: ``require_review``, ``allow_direct`` or ``auto_send_graduated``, and
            where that value comes from.
        """
        return Call("GET", "/v1/review-policy", raw)

    @verb
    @staticmethod
    def get_risk_dial(*, category_id: str | None = None) -> Call[RiskDial]:
        """Read the brand-risk dial in force (``GET /v1/risk-dial``); only a human can change it.

        Args:
            category_id: Only this category's overrides.

        Returns:
            The :class:`RiskDial`: the account defaults, and each category's overrides with its effective
            values (a ``None`` override inherits the account default).
        """
        return Call("GET", "/v1/risk-dial", shaped(RiskDial), params=drop_none(dict(category_id=category_id)))
