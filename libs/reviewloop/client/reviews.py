"""The agent plane's reviews, after the send.

Reading a draft, its thread and its feedback; redrafting, restamping, cancelling; asking the human.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reviewloop.client.call import Call, Json, drop_none, quoted, raw, shaped, verb
from reviewloop.shapes import Review, ReviewDecisionContext, ReviewFeedback, ReviewList, ReviewTurnList


class ReviewVerbs:
    """A composer's verbs on its reviews, after the send."""

    @verb
    @staticmethod
    def get_review(review_id: str) -> Call[Review]:
        """Read one review (``GET /v1/reviews/{review_id}``), legal from every state.

        The definitive per-review poll: ``closed`` is true once the review is ``sent``, ``auto_sent``,
        ``cancelled`` or ``failed``; ``send_error`` and ``send_path`` say how it ended.

        Args:
            review_id: The ``rr_`` id.

        Returns:
            The :class:`Review`, with its current ``state``, ``revision`` and ``version``.

        Raises:
            ReviewloopError: ``404 not_found`` for a review outside the caller's project.
        """
        return Call("GET", f"/v1/reviews/{quoted(review_id)}", shaped(Review))

    @verb
    @staticmethod
    def get_review_turns(review_id: str) -> Call[ReviewTurnList]:
        """Read a review's append-only thread, oldest first (``GET /v1/reviews/{review_id}/turns``).

        Args:
            review_id: The ``rr_`` id.

        Returns:
            A :class:`ReviewTurnList`: the ``items`` (chat, decisions, revisions, ...) and their ``total``.

        Raises:
            ReviewloopError: ``404 not_found`` for a review outside the caller's project.
        """
        return Call("GET", f"/v1/reviews/{quoted(review_id)}/turns", shaped(ReviewTurnList))

    @verb
    @staticmethod
    def get_review_decision_context(review_id: str) -> Call[ReviewDecisionContext]:
        """Read what a reviewer weighs before deciding (``GET /v1/reviews/{review_id}/decision-context``).

        Returns:
            A :class:`ReviewDecisionContext`: the ``review`` and its ``turns``; ``hop_count`` and
            ``max_hops`` (null before the first review-agent round) and ``hops_exhausted``; the draft's
            ``review_deadline`` (null: none) and ``deadline_passed``; ``force_to_human`` when either breaker
            tripped (or one held a review agent's release), named by ``force_reason``.

        Raises:
            ReviewloopError: ``404 not_found`` for a review outside the caller's project.
        """
        return Call("GET", f"/v1/reviews/{quoted(review_id)}/decision-context", shaped(ReviewDecisionContext))

    @verb
    @staticmethod
    def list_reviews(
        *,
        state: Sequence[str] = (),
        agent_id: str | None = None,
        composer: str | None = None,
        category_id: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        inbox: str | None = None,
        thread_id: str | None = None,
    ) -> Call[ReviewList]:
        """List the project's reviews (``GET /v1/reviews``), a page at a time.

        After a crash, this is how an agent re-derives its open work: filter on ``needs_review`` and
        ``rejected`` with its own ``agent_id``, then read each with :meth:`get_review`.

        Args:
            state: Only reviews in one of these states (empty: any).
            agent_id: Only reviews composed by this agent.
            composer: ``"me"``: only the caller's own drafts (the SDK's filter).
            category_id: Only reviews in this category.
            cursor: The ``next_cursor`` of the previous page.
            inbox: Only reviews sent from this inbox (their ``from_address``).
            thread_id: Only the replies in this thread (their ``thread_ref``).
            limit: Page size (1..200; the server's default is 50).

        Returns:
            A :class:`ReviewList` (``items``, ``total``); its ``next_cursor`` is ``None`` on the last page.

        Raises:
            ReviewloopError: ``bad_request`` for an unknown state.
        """
        params = drop_none(
            dict(
                state=list(state) or None,
                agent_id=agent_id,
                composer=composer,
                category_id=category_id,
                cursor=cursor,
                limit=limit,
                inbox=inbox,
                thread_id=thread_id,
            )
        )
        return Call("GET", "/v1/reviews", shaped(ReviewList), params=params)

    @verb
    @staticmethod
    def submit_revision(
        review_id: str, *, parent_revision: int, idempotency_key: str | None = None, **fields: Any
    ) -> Call[Review]:
        """Redraft a review (``POST /v1/reviews/{review_id}/revisions``); this bumps its ``revision``.

        Legal from ``needs_review``, ``chatting`` and ``rejected``. Pass the ``composition_token`` of the
        rule snapshot the redraft applied, so a draft built against older rules is caught.

        Args:
            review_id: The ``rr_`` id.
            parent_revision: The ``revision`` the redraft was built on (the optimistic check).
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **fields: The redraft: ``subject``, ``text``, ``composition_token`` (or ``rules_version_seen``,
                the ``rule_high_water`` of the rules applied), ``version`` (a second compare-and-set, on
                the row's version), ``intent``, ``attachments`` (omit to keep them, ``[]`` to clear
                them), ...

        Returns:
            The :class:`Review` at its new revision.

        Raises:
            ReviewloopError: ``409 stale`` when a human moved the draft since ``parent_revision`` (re-read,
                re-apply, retry up to 3 times); ``409 born_stale`` when the token predates the current rules
                (``get_rules`` and re-apply, or :meth:`restamp_review`); ``409 wrong_state`` when a redraft is
                not legal now (read ``allowed_actions``); ``409 terminal`` when the review is already closed
                (stop: a ``front_run_next`` nudge carries the outcome).
        """
        body = drop_none(dict(parent_revision=parent_revision, **fields))
        return Call(
            "POST", f"/v1/reviews/{quoted(review_id)}/revisions", shaped(Review), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def restamp_review(
        review_id: str,
        *,
        parent_revision: int | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Call[Review]:
        """Re-stamp a draft against the current rules without changing it (``POST .../{review_id}/restamp``).

        For the honest case only: the rules were re-read and nothing needed to change. Restamping a draft
        whose body did change makes it lie to the born-stale accounting.

        Args:
            review_id: The ``rr_`` id.
            parent_revision: The ``revision`` that was re-checked; omitted, the current one (or the one
                ``expected_version`` holds).
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **fields: The rules re-read: their ``composition_token``, or the SDK's ``against_version``
                (the ``category_rules_version``) and ``house_style_version`` ``get_rules`` reported;
                ``expected_version``, a compare-and-set on the row's version; ``recheck_through_seq``,
                the highest of the review's recheck nudge seqs handled (the answer's
                ``recheck_completed_through_seq`` then covers it).

        Returns:
            The :class:`Review`, stamped with the current rule high-water.

        Raises:
            ReviewloopError: ``422 bad_request`` naming ``/composition_token`` and ``/against_version``
                when neither is given (a restamp names the rules it re-read); ``409 born_stale`` when the
                rules moved past those named; ``409 stale``, ``409 wrong_state`` or ``409 terminal``, as
                for :meth:`submit_revision`.
        """
        body = drop_none(dict(parent_revision=parent_revision, **fields))
        return Call(
            "POST", f"/v1/reviews/{quoted(review_id)}/restamp", shaped(Review), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def cancel_review(
        review_id: str, *, parent_revision: int | None = None, idempotency_key: str | None = None
    ) -> Call[Review]:
        """Withdraw a review (``POST /v1/reviews/{review_id}/cancel``).

        Legal from every state but ``approved`` and the closed ones, and the one close-out of a ``failed``
        send. A ``cancelled`` terminal nudge follows, even for the caller's own cancel.

        Args:
            review_id: The ``rr_`` id.
            parent_revision: The ``revision`` the caller last read; omitted, the current one is withdrawn.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.

        Returns:
            The :class:`Review`, now ``cancelled``.

        Raises:
            ReviewloopError: ``409 stale`` when the draft moved since ``parent_revision``;
                ``409 wrong_state`` while it is ``approved`` (being delivered); ``409 terminal`` once it is
                ``sent``, ``auto_sent`` or ``cancelled``.
        """
        return Call(
            "POST", f"/v1/reviews/{quoted(review_id)}/cancel", shaped(Review),
            body=drop_none({"parent_revision": parent_revision}), idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def post_review_chat(review_id: str, *, text: str, idempotency_key: str | None = None) -> Call[Json]:
        """Ask the human a question on the review thread (``POST /v1/reviews/{review_id}/chat``).

        Posts an ``agent_question`` turn. From ``in_review`` it flips the review to ``chatting``; from
        ``needs_review`` it does not open the draft. Retrying with the same ``idempotency_key`` never
        doubles the turn.

        Args:
            review_id: The ``rr_`` id.
            text: The question.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.

        Returns:
            The review's JSON, with the posted ``turn`` added.

        Raises:
            ReviewloopError: ``409 wrong_state`` from a state where chat is not legal; ``409 terminal`` once
                the review is closed.
        """
        return Call(
            "POST", f"/v1/reviews/{quoted(review_id)}/chat", raw, body={"text": text},
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def get_review_feedback(review_id: str) -> Call[ReviewFeedback]:
        """Read the human's decision on a review (``GET /v1/reviews/{review_id}/feedback``).

        Args:
            review_id: The ``rr_`` id.

        Returns:
            The :class:`ReviewFeedback`: the decision, the unified and structured diff of the human's edit,
            their comments, the ``rule_`` ids born from this review, and the ``approvers`` whose approval
            stands on the current revision (every approver of a category's quorum).

        Raises:
            ReviewloopError: ``404 not_found`` for a review outside the caller's project.
        """
        return Call("GET", f"/v1/reviews/{quoted(review_id)}/feedback", shaped(ReviewFeedback))
