"""The typed Python client of the agent contract (spec 000), async and sync, over httpx.

Example::

    async with AsyncReviewloop("http://127.0.0.1:8080", api_key) as rl:
        sent = await rl.send_email(to=["vp@acme.com"], subject="Q3 pilot", body_text="...",
                                   intent={"summary": "Re-engage cold lead at Acme about Q3 pilot"})
        for event in (await rl.wait_for_review_event(timeout_s=30)).events: ...

Every verb is built once as a :class:`Call` (route, arguments, answer shape) and run by either client, so
the two can never disagree. Answers parse into the contract's shapes, ignoring fields this client does not
know yet (the contract grows additively across 0.x). A failure raises :class:`ReviewloopError` carrying the
problem+json: branch on ``error.code``; a gateway that cannot be reached raises its subclass
:class:`ReviewloopConnectionError` (code ``unavailable``), never a raw ``httpx`` error. Every mutation carries
an ``Idempotency-Key`` (a fresh one unless you pass yours), so the client's own retries (``tenacity``:
connection errors, ``503 unavailable``, and a ``429`` or ``503`` with ``Retry-After``, with jittered
exponential backoff or after the ``Retry-After``) can never double a write; a request without a key is
never repeated.
"""

from __future__ import annotations

import asyncio
import hmac
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar
from urllib.parse import quote

import httpx
import httpx_sse
import standardwebhooks
from pydantic import BaseModel
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_never,
    stop_after_attempt,
    wait_random_exponential,
)

from reviewloop.contract import CONTRACT_VERSION
from reviewloop.errors import is_retryable as _is_retryable
from reviewloop.shapes import (
    AckReviewEventResult,
    Category,
    CategoryAudit,
    CategoryList,
    CategoryMerge,
    CategoryPacingState,
    Contact,
    ContactList,
    ContractManifest,
    DeadLetter,
    DeadLetterList,
    GraduationProposal,
    GraduationProposalList,
    GraduationStatus,
    Problem,
    Review,
    ReviewDecisionContext,
    ReviewEvent,
    ReviewEventsResult,
    ReviewFeedback,
    ReviewList,
    ReviewRun,
    ReviewTurnList,
    RiskDial,
    Rule,
    RuleAudit,
    RuleSnapshot,
    ScanBacklogStatus,
    SubmitForReviewResult,
)

T = TypeVar("T")
P = ParamSpec("P")
M = TypeVar("M", bound=BaseModel)
Json = dict[str, Any]

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 2
# The jittered exponential backoff between retries without a Retry-After: a random wait in
# [0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**attempt)] ("full jitter"), so clients that failed together
# do not come back together.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
# A Retry-After longer than this is not waited out inside one call: the error is raised with it.
MAX_RETRY_AFTER_S = 60.0


class ReviewloopError(Exception):
    """A problem+json answer from the gateway.

    Branch on ``code``, never on ``status`` alone: several distinct conflicts share ``409``. ``code`` is
    the closed enum, and a code this client does not know yet reads as ``internal``. :meth:`facts`
    reads the recovery facts the problem carries (``state``, ``revision``, ``version``,
    ``allowed_action``, ``sent_message_id``), so a ``409 stale`` retry needs no extra read.

    Attributes:
        status: The HTTP status.
        problem: The problem+json body as received.
        retry_after: The ``Retry-After`` seconds of a ``503 unavailable``, if the server sent one.
        code: The problem ``code``.
        detail: The problem's ``detail``: the whole fix, in a sentence or two.
    """

    def __init__(self, status: int, problem: Json, retry_after: float | None = None) -> None:
        self.status = status
        self.problem = problem
        self.retry_after = retry_after
        try:
            parsed = Problem.model_validate(problem, extra="ignore")
            self.code: str = parsed.code.value
        except ValueError:
            self.code = "internal"
        self.detail: str = str(problem.get("detail", ""))
        super().__init__(f"{status} {self.code}: {self.detail}")

    def facts(self, name: str) -> list[Any]:
        """Every recovery fact named ``name`` (``allowed_action`` repeats; the others appear once).

        A fact is the hint whose ``field`` is ``name``; ``revision`` and ``version`` read as ints.
        """
        values = [e.get("detail") for e in self.problem.get("errors") or [] if e.get("field") == name]
        if name in ("revision", "version"):
            return [int(v) for v in values if str(v).isdigit()]
        return values

    @property
    def allowed_actions(self) -> list[str]:
        """The verbs legal from the review's current state, as the problem's hints name them."""
        return [str(v) for v in self.facts("allowed_action")]

    @property
    def retryable(self) -> bool:
        """Whether the problem is worth repeating (:func:`is_retryable`)."""
        return is_retryable(self)


class ReviewloopConnectionError(ReviewloopError):
    """The gateway could not be reached, or its answer never came, after the client's retries.

    Refused, reset or timed out: it reads as a ``unavailable`` problem (``status`` 0: no answer), and the
    ``httpx`` error is its ``__cause__``. A mutation may have landed: repeat it with the same
    ``idempotency_key``.

    Attributes:
        method: The request's method.
        url: The URL it was sent to.
    """

    def __init__(self, method: str, url: str, cause: httpx.TransportError) -> None:
        self.method = method
        self.url = url
        detail = f"{method} {url} failed: {type(cause).__name__}: {cause or 'no answer'}"
        problem = {
            "type": "https://reviewloop.dev/problems/unavailable",
            "title": "Unreachable",
            "status": 0,
            "detail": detail,
            "code": "unavailable",
        }
        super().__init__(0, problem)


def is_retryable(problem: ReviewloopError | Mapping[str, Any]) -> bool:
    """Whether a problem is worth repeating, by the published table (``REVIEW_PROBLEM_RETRYABLE``).

    The manifest serves the table, with ``review_problem_retry_limits``. Never blind: the client itself repeats only ``503 unavailable`` (same Idempotency-Key, after its
    Retry-After). ``stale`` (at most 3 times) and ``reply_context_changed`` are worth repeating after a
    re-read and re-applying your change on top of what is there now; ``born_stale`` once per rule
    high-water, after ``get_rules`` and a redraft (or an honest restamp). Every other code fails again until
    the request itself changes.

    Args:
        problem: A :class:`ReviewloopError`, or a problem+json body.
    """
    code = problem.code if isinstance(problem, ReviewloopError) else str(problem.get("code", "internal"))
    return _is_retryable(code)


def _shape(model: type[M]) -> Callable[[Any], M]:
    return lambda data: model.model_validate(data, extra="ignore")


def _raw(data: Any) -> Json:
    return dict(data)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One verb: the route, its arguments, and how to read its answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Json | None = None
    idempotency_key: str | None = None
    timeout_s: float | None = None

    @property
    def mutation(self) -> bool:
        """Whether the verb writes; a mutation is always sent with an ``Idempotency-Key``."""
        return self.method != "GET"


def _id(value: str) -> str:
    return quote(value, safe="")


def _drop_none(values: Mapping[str, Any]) -> Json:
    return {k: v for k, v in values.items() if v is not None}


class Verbs:
    """Builds the Call of every agent verb (DESIGN.md's agent-plane table), named as the spec names it.

    Each builder's docstring is also the docstring of the same-named method on :class:`AsyncReviewloop`
    and :class:`Reviewloop`: its ``Returns`` names the shape the answer parses into, and its ``Raises``
    the problems the clients raise as :class:`ReviewloopError`.
    """

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
        body = _drop_none(
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
            "POST", "/v1/messages", _shape(SubmitForReviewResult), body=body, idempotency_key=idempotency_key
        )

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
        body = _drop_none(dict(text=body_text, intent=intent, **extra))
        return Call(
            "POST", f"/v1/messages/{_id(message_id)}/reply", _shape(SubmitForReviewResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

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
        body = _drop_none(dict(text=body_text, intent=intent, **extra))
        return Call(
            "POST", f"/v1/threads/{_id(thread_id)}/reply", _shape(SubmitForReviewResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

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
        body = _drop_none(dict(to=list(to), text=body_text, intent=intent, **extra))
        return Call(
            "POST", f"/v1/messages/{_id(message_id)}/forward", _shape(SubmitForReviewResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

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
        return Call("GET", f"/v1/reviews/{_id(review_id)}", _shape(Review))

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
        return Call("GET", f"/v1/reviews/{_id(review_id)}/turns", _shape(ReviewTurnList))

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
        return Call("GET", f"/v1/reviews/{_id(review_id)}/decision-context", _shape(ReviewDecisionContext))

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
        params = _drop_none(
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
        return Call("GET", "/v1/reviews", _shape(ReviewList), params=params)

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
        body = _drop_none(dict(parent_revision=parent_revision, **fields))
        return Call(
            "POST", f"/v1/reviews/{_id(review_id)}/revisions", _shape(Review), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

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
        body = _drop_none(dict(parent_revision=parent_revision, **fields))
        return Call(
            "POST", f"/v1/reviews/{_id(review_id)}/restamp", _shape(Review), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

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
            "POST", f"/v1/reviews/{_id(review_id)}/cancel", _shape(Review),
            body=_drop_none({"parent_revision": parent_revision}), idempotency_key=idempotency_key,
        )  # fmt: skip

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
            "POST", f"/v1/reviews/{_id(review_id)}/chat", _raw, body={"text": text},
            idempotency_key=idempotency_key,
        )  # fmt: skip

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
        return Call("GET", f"/v1/reviews/{_id(review_id)}/feedback", _shape(ReviewFeedback))

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
        params = _drop_none(dict(limit=limit, cursor=cursor, review_id=review_id))
        return Call("GET", "/v1/review-events", _shape(ReviewEventsResult), params=params)

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
        params = _drop_none(dict(wait_seconds=timeout_s, limit=limit, review_id=review_id))
        # The server holds the request up to timeout_s: read for longer than that.
        return Call(
            "GET",
            "/v1/review-events/wait",
            _shape(ReviewEventsResult),
            params=params,
            timeout_s=timeout_s + 10,
        )

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
            "POST", "/v1/review-events/ack", _shape(AckReviewEventResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    # The skill catalog's name for the same verb.
    ack_review_event = ack_review_events

    @staticmethod
    def get_rules(*, scope: str | None = None, category_id: str | None = None) -> Call[RuleSnapshot]:
        """Read the effective rule stack, precedence ladder applied (``GET /v1/rules``).

        Compose with the whole stack: unfiltered, the answer also carries the rule versions, the rule
        high-water and a short-lived ``composition_token`` to pass with the draft. A filtered query is for
        browsing and carries no token.

        Args:
            scope: Only rules of this scope (``general`` or ``category``).
            category_id: Only rules that apply to this category.

        Returns:
            A :class:`RuleSnapshot`, with the ``composition_token`` when unfiltered.
        """
        return Call(
            "GET",
            "/v1/rules",
            _shape(RuleSnapshot),
            params=_drop_none(dict(scope=scope, category_id=category_id)),
        )

    @staticmethod
    def save_rule(
        *,
        rule_text: str,
        scope: str,
        category_id: str | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Call[Rule]:
        """Save a project-layer writing rule, or revise one (``POST /v1/rules``).

        An agent always writes the ``project`` layer; org-wide house style is authored from the console.

        Args:
            rule_text: The rule, as the composing agent should apply it.
            scope: ``general`` or ``category``.
            category_id: The category a ``category`` rule applies to.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **fields: Further request fields: to revise, ``supersedes_id`` (the ``rule_`` id of the revision
                replaced, the SDK's way) or ``lineage_id`` and the ``expected_rev`` that was read; also ``kind``, ``priority``, ``source_review_id`` and ``source_turn_id`` (the turn
                of that review it was learnt from), ``scope_agent_id`` (a per-agent rule),
                ``propagate_to_pending`` (default true: the pending drafts the rule leaves stale are nudged
                a look-ahead window at a time) and ``suggested_batch`` (what each such nudge suggests; 0:
                the window) ...

        Returns:
            The saved :class:`Rule` (``201``).

        Raises:
            ReviewloopError: ``409 stale`` when ``expected_rev`` is no longer the lineage's current
                revision (re-read, re-apply, save again); ``409 conflict`` when a rule in the same
                scope already says this; ``bad_request`` for a ``category`` rule without its
                category, or a ``general`` one with one.
        """
        body = _drop_none(dict(rule_text=rule_text, scope=scope, category_id=category_id, **fields))
        return Call("POST", "/v1/rules", _shape(Rule), body=body, idempotency_key=idempotency_key)

    @staticmethod
    def learn_review_rule(
        review_id: str, *, rule_text: str, idempotency_key: str | None = None, **fields: Any
    ) -> Call[Rule]:
        """Save a project rule learnt from a review's diff and comments (``POST /v1/reviews/{id}/rules``).

        Args:
            review_id: The ``rr_`` id the rule was learnt from (its ``source_review_id``).
            rule_text: The rule.
            idempotency_key: Reuse it to retry safely; a fresh key is generated when omitted.
            **fields: ``turn_id`` (one of the review's turns), ``scope`` (default: the review's
                category, else general), ``category_id``, ``kind``.

        Returns:
            The saved :class:`Rule` (``201``).

        Raises:
            ReviewloopError: ``404`` for a review outside the caller's project; ``bad_request`` for a
                turn of another review (422); as :meth:`save_rule` otherwise.
        """
        body = _drop_none(dict(rule_text=rule_text, **fields))
        return Call(
            "POST",
            f"/v1/reviews/{_id(review_id)}/rules",
            _shape(Rule),
            body=body,
            idempotency_key=idempotency_key,
        )

    @staticmethod
    def get_rule_audit(lineage_id: str) -> Call[RuleAudit]:
        """Read the changes of a rule lineage, oldest first (``GET /v1/rules/{lineage_id}/audit``).

        Args:
            lineage_id: The ``rln_`` id.

        Returns:
            A :class:`RuleAudit`: each change (``create``, ``supersede``, ``retire``, ``restore``, ...), who
            made it, the rule before and after, and whether an undo took it back.

        Raises:
            ReviewloopError: ``404 not_found`` for a lineage the caller's project cannot see.
        """
        return Call("GET", f"/v1/rules/{_id(lineage_id)}/audit", _shape(RuleAudit))

    @staticmethod
    def retire_rule(lineage_id: str, *, rev: int, idempotency_key: str | None = None) -> Call[Rule]:
        """Retire a project rule (``POST /v1/rules/{lineage_id}/retire``).

        Args:
            lineage_id: The ``rln_`` id.
            rev: The lineage's current rev, as read (read-before-write).
            idempotency_key: Reuse it to retry safely; a fresh key is generated when omitted.

        Returns:
            The new, ``retired`` revision as a :class:`Rule`.

        Raises:
            ReviewloopError: ``409 stale`` when ``rev`` is no longer current; ``403 forbidden_scope`` for
                org house style or under staged approval (the console's); ``404`` for another project's.
        """
        return Call(
            "POST",
            f"/v1/rules/{_id(lineage_id)}/retire",
            _shape(Rule),
            body={"rev": rev},
            idempotency_key=idempotency_key,
        )

    @staticmethod
    def promote_rule(
        lineage_id: str, *, rev: int, to_layer: str | None = None, idempotency_key: str | None = None
    ) -> Call[Rule]:
        """Promote a rule (``POST /v1/rules/{lineage_id}/promote``).

        An active category rule becomes general; with ``to_layer="org"`` an active project rule becomes
        org house style (an admin key).

        Returns:
            The new revision as a :class:`Rule`: ``general``, and for ``org`` with ``rule_layer: org``.

        Raises:
            ReviewloopError: ``409 wrong_state`` unless the rule can be promoted so; ``403
                forbidden_scope`` for house style without an admin key; otherwise as :meth:`retire_rule`.
        """
        return Call(
            "POST",
            f"/v1/rules/{_id(lineage_id)}/promote",
            _shape(Rule),
            body=_drop_none(dict(rev=rev, to_layer=to_layer)),
            idempotency_key=idempotency_key,
        )

    @staticmethod
    def undo_rule_change(lineage_id: str, *, rev: int, idempotency_key: str | None = None) -> Call[Rule]:
        """Restore the rule's revision in force before its last change (``POST /v1/rules/{id}/undo``).

        Undoing a creation retires the rule.

        Args:
            lineage_id: The ``rln_`` id.
            rev: The lineage's current rev, as read.
            idempotency_key: Reuse it to retry safely; a fresh key is generated when omitted.

        Returns:
            The new revision as a :class:`Rule`.

        Raises:
            ReviewloopError: as :meth:`retire_rule`.
        """
        return Call(
            "POST",
            f"/v1/rules/{_id(lineage_id)}/undo",
            _shape(Rule),
            body={"rev": rev},
            idempotency_key=idempotency_key,
        )

    @staticmethod
    def list_categories(*, cursor: str | None = None) -> Call[CategoryList]:
        """List the category registry a draft is matched against (``GET /v1/categories``).

        The matching is the agent's: categories are keyed on the opaque ``cat_`` id, and their names are
        mutable display metadata.

        Args:
            cursor: The ``next_cursor`` of the previous page.

        Returns:
            A :class:`CategoryList`; its ``next_cursor`` is ``None`` on the last page.
        """
        return Call("GET", "/v1/categories", _shape(CategoryList), params=_drop_none(dict(cursor=cursor)))

    @staticmethod
    def create_category(
        *, name: str, description: str = "", idempotency_key: str | None = None, **fields: Any
    ) -> Call[Category]:
        """Add a category to the registry (``POST /v1/categories``), authored by the agent.

        Args:
            name: The display name.
            description: What kind of message belongs in it, for matching.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **fields: Further request fields (``scope``: ``org_shared``, the default, or ``project``).

        Returns:
            The created :class:`Category` (``201``), starting ``supervised``.

        Raises:
            ReviewloopError: ``409 conflict`` when a category already has that name (its id is in
                the hints: use it rather than a twin); ``bad_request`` for an unknown scope.
        """
        body = _drop_none(dict(name=name, description=description, **fields))
        return Call("POST", "/v1/categories", _shape(Category), body=body, idempotency_key=idempotency_key)

    @staticmethod
    def update_category(
        category_id: str, *, name: str | None = None, description: str | None = None
    ) -> Call[Category]:
        """Rename or redescribe a category (``PATCH /v1/categories/{category_id}``).

        An omitted field is untouched; the id never changes.

        Returns:
            The updated :class:`Category`.

        Raises:
            ReviewloopError: ``409 conflict`` when another category has that name (its id is in the
                hints); ``404`` for a category the caller's project cannot see.
        """
        body = _drop_none(dict(name=name, description=description))
        return Call("PATCH", f"/v1/categories/{_id(category_id)}", _shape(Category), body=body)

    @staticmethod
    def merge_categories(
        category_id: str, *, into_category_id: str, rationale: str, idempotency_key: str | None = None
    ) -> Call[CategoryMerge]:
        """Merge a category into another (``POST /v1/categories/{category_id}/merge``).

        Its live rules and pending drafts move to ``into_category_id`` (each draft's agent gets a
        ``recheck_category`` nudge, reason ``merged``) and it is retired (``merged_into``).

        Args:
            category_id: The ``cat_`` id merged away.
            into_category_id: The ``cat_`` id that stays.
            rationale: Why both describe the same purpose.
            idempotency_key: Reuse it to retry safely; a fresh key is generated when omitted.

        Returns:
            A :class:`CategoryMerge`: both categories as they now are, how many rules moved, and the
            merge's audit entry (with the rationale).

        Raises:
            ReviewloopError: ``403 forbidden_scope`` for an agent's merge outside the catalog's limits (both
                agent-authored, shared, supervised, under 24 hours old, governed alike, used by its project
                alone; the limit is the ``reason`` hint); ``409 conflict`` when either was merged elsewhere (``merged_into``
                in the hints); ``404`` for a category the caller's project cannot see.
        """
        body = {"into_category_id": into_category_id, "rationale": rationale}
        return Call(
            "POST",
            f"/v1/categories/{_id(category_id)}/merge",
            _shape(CategoryMerge),
            body=body,
            idempotency_key=idempotency_key,
        )

    @staticmethod
    def get_category_audit(category_id: str) -> Call[CategoryAudit]:
        """The merges a category took part in, either side (``GET /v1/categories/{category_id}/audit``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            A :class:`CategoryAudit`: each merge's who, when, from, into, rationale and rules moved, oldest
            first.

        Raises:
            ReviewloopError: ``404`` for a category the caller's project cannot see.
        """
        return Call("GET", f"/v1/categories/{_id(category_id)}/audit", _shape(CategoryAudit))

    @staticmethod
    def get_category(category_id: str) -> Call[Category]:
        """Read one category (``GET /v1/categories/{category_id}``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            The :class:`Category`.

        Raises:
            ReviewloopError: ``404 not_found`` for a category the caller's project cannot see.
        """
        return Call("GET", f"/v1/categories/{_id(category_id)}", _shape(Category))

    @staticmethod
    def get_backlog_status(category_id: str) -> Call[ScanBacklogStatus]:
        """Count a category's queued drafts, current or stale against its rules (``GET .../backlog``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            The :class:`ScanBacklogStatus`: ``queued``, ``current_enough`` and ``stale`` (composed under an
            older rule high-water: redraft them a few at a time, or restamp the ones that need no change).

        Raises:
            ReviewloopError: ``404 not_found`` for a category the caller's project cannot see.
        """
        return Call("GET", f"/v1/categories/{_id(category_id)}/backlog", _shape(ScanBacklogStatus))

    @staticmethod
    def get_pacing_state(category_id: str) -> Call[CategoryPacingState]:
        """How a category's stale drafts are being worked through (``GET .../pacing``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            The :class:`CategoryPacingState`: the project's pacing values, the review cursor (the draft a
            human last decided), and each queued draft fresh (``in_window_fresh``), nudged and awaiting its
            redraft or restamp (``in_window_redrafting``), waiting for a slot (``ahead``) or passed over by
            the human (``behind_cursor``), with ``next_review_ids`` in order.

        Raises:
            ReviewloopError: ``404 not_found`` for a category the caller's project cannot see.
        """
        return Call("GET", f"/v1/categories/{_id(category_id)}/pacing", _shape(CategoryPacingState))

    @staticmethod
    def get_graduation_status(category_id: str) -> Call[GraduationStatus]:
        """Read a category's progress toward its next rung (``GET /v1/categories/{category_id}/graduation``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            The :class:`GraduationStatus`: the next state, the maturity counters against their thresholds,
            and ``can_graduate``, whether a human's graduate would succeed now.

        Raises:
            ReviewloopError: ``404 not_found`` for a category outside the caller's project.
        """
        return Call("GET", f"/v1/categories/{_id(category_id)}/graduation", _shape(GraduationStatus))

    @staticmethod
    def propose_graduation(
        category_id: str,
        *,
        evidence: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Call[GraduationStatus]:
        """Propose graduating a category to its next rung (``POST .../{category_id}/graduation-proposals``).

        An agent only proposes; a human flips the bit. The proposal, and how a human decided it, are read
        with :meth:`list_graduation_proposals_of_category`.

        Args:
            category_id: The ``cat_`` id.
            evidence: Opaque structured evidence for the human (the SDK's), e.g. ``{"approvals": 20}``.
            idempotency_key: Reuse it to retry the same request safely (no second proposal); a fresh key is
                generated when omitted.
            **fields: ``to_state`` (default: the next rung) and a ``note`` for the human.

        Returns:
            The category's :class:`GraduationStatus` (``201``), as the SDK reads it.

        Raises:
            ReviewloopError: ``409 graduation_locked`` for a category marked ``never_graduate``;
                ``bad_request`` when ``to_state`` is not the category's next rung.
        """
        body = _drop_none(dict(evidence=evidence, **fields))
        return Call(
            "POST",
            f"/v1/categories/{_id(category_id)}/graduation-proposals",
            _shape(GraduationStatus),
            body=body,
        )

    @staticmethod
    def list_graduation_proposals_of_category(category_id: str) -> Call[GraduationProposalList]:
        """The category's graduation proposals, newest first (``GET .../{category_id}/graduation-proposals``).

        How an agent learns what a human did with its proposal: ``status`` is ``proposed`` (waiting),
        ``approved`` (the category graduated to it) or ``rejected`` with the human's ``reason``, verbatim.

        Args:
            category_id: The ``cat_`` id.

        Returns:
            A :class:`GraduationProposalList`, decided proposals included.

        Raises:
            ReviewloopError: ``404`` for a category this key does not see.
        """
        return Call(
            "GET", f"/v1/categories/{_id(category_id)}/graduation-proposals", _shape(GraduationProposalList)
        )

    @staticmethod
    def reject_graduation_proposal(
        project_id: str, proposal_id: str, *, reason: str, idempotency_key: str | None = None
    ) -> Call[GraduationProposal]:
        """Reject a graduation proposal with a reason; the category stays on its rung.

        ``POST /v1/admin/projects/{project_id}/graduation-proposals/{proposal_id}/reject``; takes an admin
        key. The proposing agent reads ``reason`` verbatim (:meth:`list_graduation_proposals_of_category`). To approve
        a proposal instead, graduate its category to the proposal's ``to_state``.

        Args:
            project_id: The proposal's ``prj_`` project.
            proposal_id: The ``gprop_`` id.
            reason: Why, for the agent.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.

        Returns:
            The :class:`GraduationProposal`, now ``rejected``.

        Raises:
            ReviewloopError: ``409 wrong_state`` for a proposal already decided or moot; ``403`` for a
                non-admin key.
        """
        return Call(
            "POST",
            f"/v1/admin/projects/{_id(project_id)}/graduation-proposals/{_id(proposal_id)}/reject",
            _shape(GraduationProposal), body={"reason": reason}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def get_risk_dial(*, category_id: str | None = None) -> Call[RiskDial]:
        """Read the brand-risk dial in force (``GET /v1/risk-dial``); only a human can change it.

        Args:
            category_id: Only this category's overrides.

        Returns:
            The :class:`RiskDial`: the account defaults, and each category's overrides with its effective
            values (a ``None`` override inherits the account default).
        """
        return Call(
            "GET", "/v1/risk-dial", _shape(RiskDial), params=_drop_none(dict(category_id=category_id))
        )

    @staticmethod
    def get_effective_review_policy() -> Call[Json]:
        """Read the project's resolved review policy before sending (``GET /v1/review-policy``).

        Returns:
            ``{"policy", "source"}``: ``require_review``, ``allow_direct`` or ``auto_send_graduated``, and
            where that value comes from.
        """
        return Call("GET", "/v1/review-policy", _raw)

    @staticmethod
    def resolve_delivery(
        project_id: str, review_id: str, *, outcome: str, reason: str, idempotency_key: str | None = None
    ) -> Call[Review]:
        """Close a parked delivery by evidence: an operator's "mark delivered" / "mark failed".

        ``POST /v1/admin/projects/{project_id}/reviews/{review_id}/delivery-resolution``; takes an admin key.

        A delivery whose relay took the message but whose answer was lost is parked
        (``delivery.status == "send_needs_reconciliation"`` on :meth:`get_review`); the platform never
        resends it and no timer fails it. Only evidence closes it: the Sent folder over IMAP, or this verb.

        Args:
            project_id: The review's ``prj_`` project.
            review_id: The ``rr_`` id.
            outcome: ``delivered`` (the review becomes ``sent``) or ``failed`` (``failed``, with the reason
                as its ``send_error``).
            reason: The evidence, kept on the delivery as its ``resolution``.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.

        Returns:
            The :class:`Review`, now ``sent`` / ``auto_sent`` or ``failed``.

        Raises:
            ReviewloopError: ``409 wrong_state`` unless the delivery is parked; ``403`` for a non-admin key.
        """
        return Call(
            "POST",
            f"/v1/admin/projects/{_id(project_id)}/reviews/{_id(review_id)}/delivery-resolution",
            _shape(Review), body={"outcome": outcome, "reason": reason}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def list_dead_letters(project_id: str) -> Call[DeadLetterList]:
        """Read a project's dead letters (``GET /v1/admin/projects/{project_id}/dead-letters``); admin key.

        A dead letter is an event a receiver refused for good (a malformed body, a state it can never take):
        set aside so the events after it flow, until an admin retries or discards it.

        Returns:
            The :class:`DeadLetterList`, newest first across every service, each with the refusal's reason.
        """
        return Call("GET", f"/v1/admin/projects/{_id(project_id)}/dead-letters", _shape(DeadLetterList))

    @staticmethod
    def retry_dead_letter(
        project_id: str, event_id: str, *, idempotency_key: str | None = None
    ) -> Call[DeadLetter]:
        """Hand a dead letter back to its relay once its cause is fixed; admin key.

        ``POST /v1/admin/projects/{project_id}/dead-letters/{event_id}/retry``: delivered as if new, and
        taken once (receivers deduplicate events).

        Returns:
            The :class:`DeadLetter` as it was.

        Raises:
            ReviewloopError: ``404 not_found`` when the project holds no such dead letter (delivered,
                already retried or discarded).
        """
        return Call(
            "POST", f"/v1/admin/projects/{_id(project_id)}/dead-letters/{_id(event_id)}/retry",
            _shape(DeadLetter), body={}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def discard_dead_letter(
        project_id: str, event_id: str, *, reason: str, idempotency_key: str | None = None
    ) -> Call[DeadLetter]:
        """Give up on a dead letter, saying why; admin key. It is never delivered.

        ``POST /v1/admin/projects/{project_id}/dead-letters/{event_id}/discard``.

        Returns:
            The :class:`DeadLetter` as it was.

        Raises:
            ReviewloopError: ``404 not_found`` when the project holds no such dead letter.
        """
        return Call(
            "POST", f"/v1/admin/projects/{_id(project_id)}/dead-letters/{_id(event_id)}/discard",
            _shape(DeadLetter), body={"reason": reason}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def record_review_run(
        run_id: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> Call[ReviewRun]:
        """Record a review run, or change its status (``PUT /v1/review-rounds/runs/{run_id}``).

        Args:
            run_id: The run's id.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **fields: ``repository``, ``pr_number``, ``head_sha``, ``status`` (``active``, ``archived``,
                ``published``, ``failed``), the review-mode rungs and ``review_sequence``; an omitted
                field keeps what the run has.

        Returns:
            The :class:`ReviewRun`, with ``created_by``: the principal that created it (its owner).

        Raises:
            ReviewloopError: ``403 forbidden_scope`` for a status change by a key that may not make it.
        """
        return Call(
            "PUT", f"/v1/review-rounds/runs/{_id(run_id)}", _shape(ReviewRun), body=_drop_none(fields),
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def list_blocked_and_suppressed(project_id: str) -> Call[ContactList]:
        """The project's blocked and suppressed recipients (``GET /v1/admin/projects/{project_id}/contacts``).

        Takes an admin key. Each contact says since when and by whom each flag is set.

        Args:
            project_id: The ``prj_`` project.

        Returns:
            A :class:`ContactList`, by address.
        """
        return Call("GET", f"/v1/admin/projects/{_id(project_id)}/contacts", _shape(ContactList))

    @staticmethod
    def unblock_recipient(project_id: str, address: str) -> Call[Contact]:
        """Take a recipient off the project's block list (``DELETE .../blocks/{address}``); admin key.

        Args:
            project_id: The ``prj_`` project.
            address: The blocked address.

        Returns:
            The :class:`Contact` with ``blocked`` false.

        Raises:
            ReviewloopError: ``404`` when the address is not blocked.
        """
        return Call("DELETE", f"/v1/admin/projects/{_id(project_id)}/blocks/{_id(address)}", _shape(Contact))

    @staticmethod
    def unsuppress_recipient(project_id: str, address: str) -> Call[Contact]:
        """Take a recipient off the project's suppression list (``DELETE .../suppressions/{address}``).

        Takes an admin key.

        Args:
            project_id: The ``prj_`` project.
            address: The suppressed address.

        Returns:
            The :class:`Contact` with ``suppressed`` false.

        Raises:
            ReviewloopError: ``404`` when the address is not suppressed.
        """
        return Call(
            "DELETE", f"/v1/admin/projects/{_id(project_id)}/suppressions/{_id(address)}", _shape(Contact)
        )

    @staticmethod
    def get_contract_manifest() -> Call[ContractManifest]:
        """Read the contract manifest the server implements (``GET /v1/contract-manifest``).

        Returns:
            The :class:`ContractManifest`: the contract version to pin, and the shapes and skills it
            covers.
        """
        return Call("GET", "/v1/contract-manifest", _shape(ContractManifest))


class _Base:
    def __init__(self, base_url: str, api_key: str, *, max_retries: int = DEFAULT_RETRIES) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {
            "Authorization": f"Bearer {api_key}",
            "User-Agent": f"reviewloop-python/{CONTRACT_VERSION}",
        }
        self.max_retries = max_retries
        self.verbs = Verbs

    def _request(self, call: Call[Any]) -> dict[str, Any]:
        headers = dict(self.headers)
        if call.mutation:
            headers["Idempotency-Key"] = call.idempotency_key or f"rlc-{uuid.uuid4().hex}"
        request: dict[str, Any] = {
            "method": call.method,
            "url": call.path,
            "params": call.params,
            "headers": headers,
        }
        if call.body is not None:
            request["json"] = call.body
        if call.timeout_s is not None:
            request["timeout"] = call.timeout_s
        return request

    @staticmethod
    def _answer(call: Call[T], response: httpx.Response) -> T:
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"status": response.status_code, "code": "internal", "detail": response.text}
            raise ReviewloopError(response.status_code, problem, _retry_after(response))
        return call.parse(response.json())

    def _retrying(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The tenacity policy of one request.

        Up to ``max_retries`` repeats of a request that is safe to repeat (``_repeatable``), after a problem
        worth repeating as it is (``_worth_repeating``), waiting as ``_wait`` says.
        """
        return {
            "stop": stop_after_attempt(self.max_retries + 1),
            "wait": _wait,
            "retry": retry_if_exception(_worth_repeating) if _repeatable(request) else retry_never,
            "reraise": True,
        }


def _retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` of ``response`` in seconds (delay-seconds or an HTTP date), if any."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


def _repeatable(request: Mapping[str, Any]) -> bool:
    """Whether a request may be sent again: a read, or a write that carries its ``Idempotency-Key``.

    The server answers a keyed repeat with the first result; a write without a key is never repeated.
    """
    return request["method"] == "GET" or "Idempotency-Key" in request["headers"]


def _worth_repeating(error: BaseException) -> bool:
    """Whether a failure is worth repeating as it was.

    An unreachable gateway, ``unavailable``, or a ``429`` / ``503`` that says when to come back (soon
    enough to wait inside one call). The other retryable codes (``stale``, ...) need a re-read and a new
    request, which only the caller can make.
    """
    if not isinstance(error, ReviewloopError):
        return False
    if error.retry_after is not None and error.retry_after > MAX_RETRY_AFTER_S:
        return False
    return (
        isinstance(error, ReviewloopConnectionError)
        or error.code == "unavailable"
        or (error.status in (429, 503) and error.retry_after is not None)
    )


_backoff = wait_random_exponential(multiplier=BACKOFF_BASE_S, max=BACKOFF_MAX_S)


def _wait(state: RetryCallState) -> float:
    """The server's ``Retry-After`` when it gave one, else the jittered exponential backoff."""
    error = state.outcome.exception() if state.outcome is not None else None
    if isinstance(error, ReviewloopError) and error.retry_after is not None:
        return error.retry_after
    return float(_backoff(state))


def _async(
    builder: Callable[P, Call[T]],
) -> Callable[Concatenate[AsyncReviewloop, P], Coroutine[Any, Any, T]]:
    async def verb(client: AsyncReviewloop, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await client.run(builder(*args, **kwargs))

    verb.__name__, verb.__doc__ = builder.__name__, builder.__doc__
    return verb


def _sync(builder: Callable[P, Call[T]]) -> Callable[Concatenate[Reviewloop, P], T]:
    def verb(client: Reviewloop, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return client.run(builder(*args, **kwargs))

    verb.__name__, verb.__doc__ = builder.__name__, builder.__doc__
    return verb


@dataclass(frozen=True)
class StreamedEvent:
    """One event of :meth:`AsyncReviewloop.stream`: ``id`` is its resume point (``last_event_id``)."""

    id: str
    event: ReviewEvent


STREAM_PATH = "/v1/review-events/stream"


def _streamed(sse: httpx_sse.ServerSentEvent) -> StreamedEvent | None:
    """A ``review_event`` as a ``StreamedEvent``; None for anything else (the opening ``retry``)."""
    if sse.event != "review_event" or not sse.data:
        return None
    return StreamedEvent(sse.id, ReviewEvent.model_validate_json(sse.data))


# A refused stream that is worth opening again after its Retry-After: the service is briefly down, or
# the project holds as many open streams as the gateway allows.
_STREAM_RETRIED = frozenset({"unavailable", "rate_limited"})


class AsyncReviewloop(_Base):
    """The async client. Use as ``async with AsyncReviewloop(url, key) as rl``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, max_retries=max_retries)
        self.http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, transport=transport)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connection pool; ``async with`` does this on exit."""
        await self.http.aclose()

    async def run(self, call: Call[T]) -> T:
        """Run one verb (``await rl.run(Verbs.get_review(id))``); every verb method is this.

        A connection error, a ``503 unavailable``, or a ``429`` / ``503`` with ``Retry-After`` is retried up
        to ``max_retries`` times, after the ``Retry-After`` or a jittered exponential backoff; the call's
        ``Idempotency-Key`` makes that safe for a mutation.

        Args:
            call: The verb, as a :class:`Verbs` builder returns it.

        Returns:
            The answer, parsed into the call's shape.

        Raises:
            ReviewloopConnectionError: The gateway could not be reached, after the retries.
            ReviewloopError: The server answered a problem.
        """
        request = self._request(call)
        async for attempt in AsyncRetrying(**self._retrying(request)):
            with attempt:
                try:
                    response = await self.http.request(**request)
                except httpx.TransportError as exc:
                    raise ReviewloopConnectionError(call.method, self.base_url + call.path, exc) from exc
                return self._answer(call, response)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def stream(
        self, *, last_event_id: str | None = None, reconnect_s: float = 1.0, idle_timeout_s: float = 60.0
    ) -> AsyncGenerator[StreamedEvent, None]:
        """The caller's nudges as they land (server-sent events), forever: ``async for item in rl.stream()``.

        A dropped connection (or ``503``) is reopened after ``reconnect_s`` with ``Last-Event-ID``, so the
        stream resumes right after the last event yielded: no gap, no repeat. Keep ``item.id`` and pass it
        as ``last_event_id`` to resume in a new process. Ack as usual (``ack_review_events``): an acked
        nudge is never streamed again. ``idle_timeout_s`` must exceed the server's heartbeat (15 s).

        Raises:
            ReviewloopError: The server refused the stream (401, 403, a bad ``Last-Event-ID``); a ``429
                rate_limited`` (the project's open streams at the gateway's cap) or a ``503`` is waited out
                (its Retry-After) and the stream opened again.
        """
        cursor = last_event_id
        refusal: Call[Json] = Call("GET", STREAM_PATH, _raw)
        while True:
            headers = {**self.headers, "Accept": "text/event-stream"}
            if cursor:
                headers["Last-Event-ID"] = cursor
            timeout = httpx.Timeout(DEFAULT_TIMEOUT_S, read=idle_timeout_s)
            wait_s = reconnect_s
            try:
                async with self.http.stream("GET", STREAM_PATH, headers=headers, timeout=timeout) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        try:
                            self._answer(refusal, response)
                        except ReviewloopError as error:
                            if error.code not in _STREAM_RETRIED:
                                raise
                            wait_s = max(error.retry_after or 0, reconnect_s)
                    else:
                        async for sse in httpx_sse.EventSource(response).aiter_sse():
                            if item := _streamed(sse):
                                cursor = item.id or cursor
                                yield item
            except httpx.TransportError:
                pass  # reconnect below, resuming after the last event yielded
            await asyncio.sleep(wait_s)

    send_email = _async(Verbs.send_email)
    reply_to_email = _async(Verbs.reply_to_email)
    reply_to_thread = _async(Verbs.reply_to_thread)
    forward_email = _async(Verbs.forward_email)
    get_review = _async(Verbs.get_review)
    get_review_turns = _async(Verbs.get_review_turns)
    get_review_decision_context = _async(Verbs.get_review_decision_context)
    list_reviews = _async(Verbs.list_reviews)
    submit_revision = _async(Verbs.submit_revision)
    restamp_review = _async(Verbs.restamp_review)
    cancel_review = _async(Verbs.cancel_review)
    post_review_chat = _async(Verbs.post_review_chat)
    get_review_feedback = _async(Verbs.get_review_feedback)
    list_review_events = _async(Verbs.list_review_events)
    wait_for_review_event = _async(Verbs.wait_for_review_event)
    ack_review_events = _async(Verbs.ack_review_events)
    ack_review_event = _async(Verbs.ack_review_event)
    get_rules = _async(Verbs.get_rules)
    save_rule = _async(Verbs.save_rule)
    get_rule_audit = _async(Verbs.get_rule_audit)
    learn_review_rule = _async(Verbs.learn_review_rule)
    retire_rule = _async(Verbs.retire_rule)
    promote_rule = _async(Verbs.promote_rule)
    undo_rule_change = _async(Verbs.undo_rule_change)
    update_category = _async(Verbs.update_category)
    list_categories = _async(Verbs.list_categories)
    create_category = _async(Verbs.create_category)
    get_category = _async(Verbs.get_category)
    merge_categories = _async(Verbs.merge_categories)
    get_category_audit = _async(Verbs.get_category_audit)
    get_backlog_status = _async(Verbs.get_backlog_status)
    get_pacing_state = _async(Verbs.get_pacing_state)
    get_graduation_status = _async(Verbs.get_graduation_status)
    propose_graduation = _async(Verbs.propose_graduation)
    list_graduation_proposals_of_category = _async(Verbs.list_graduation_proposals_of_category)
    reject_graduation_proposal = _async(Verbs.reject_graduation_proposal)
    get_risk_dial = _async(Verbs.get_risk_dial)
    get_effective_review_policy = _async(Verbs.get_effective_review_policy)
    resolve_delivery = _async(Verbs.resolve_delivery)
    record_review_run = _async(Verbs.record_review_run)
    list_dead_letters = _async(Verbs.list_dead_letters)
    retry_dead_letter = _async(Verbs.retry_dead_letter)
    discard_dead_letter = _async(Verbs.discard_dead_letter)
    list_blocked_and_suppressed = _async(Verbs.list_blocked_and_suppressed)
    unblock_recipient = _async(Verbs.unblock_recipient)
    unsuppress_recipient = _async(Verbs.unsuppress_recipient)
    get_contract_manifest = _async(Verbs.get_contract_manifest)


class Reviewloop(_Base):
    """The sync client, with the same verbs. Use as ``with Reviewloop(url, key) as rl``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, max_retries=max_retries)
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connection pool; ``with`` does this on exit."""
        self.http.close()

    def run(self, call: Call[T]) -> T:
        """Run one verb (``rl.run(Verbs.get_review(id))``); every verb method is this.

        As :meth:`AsyncReviewloop.run`: a connection error, a ``503 unavailable``, or a ``429`` / ``503``
        with ``Retry-After`` is retried up to ``max_retries`` times, after the ``Retry-After`` or a
        jittered exponential backoff; the call's ``Idempotency-Key`` makes that safe for a mutation.

        Args:
            call: The verb, as a :class:`Verbs` builder returns it.

        Returns:
            The answer, parsed into the call's shape.

        Raises:
            ReviewloopConnectionError: The gateway could not be reached, after the retries.
            ReviewloopError: The server answered a problem.
        """
        request = self._request(call)
        for attempt in Retrying(**self._retrying(request)):
            with attempt:
                try:
                    response = self.http.request(**request)
                except httpx.TransportError as exc:
                    raise ReviewloopConnectionError(call.method, self.base_url + call.path, exc) from exc
                return self._answer(call, response)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def stream(
        self, *, last_event_id: str | None = None, reconnect_s: float = 1.0, idle_timeout_s: float = 60.0
    ) -> Generator[StreamedEvent, None, None]:
        """The caller's nudges as they land (server-sent events), forever: ``for item in rl.stream()``.

        As :meth:`AsyncReviewloop.stream`: a dropped connection (or ``503``) is reopened after
        ``reconnect_s`` with ``Last-Event-ID``, resuming right after the last event yielded (no gap, no
        repeat); keep ``item.id`` to resume in a new process; an acked nudge is never streamed again.

        Raises:
            ReviewloopError: The server refused the stream (401, 403, a bad ``Last-Event-ID``); a ``429
                rate_limited`` (the project's open streams at the gateway's cap) or a ``503`` is waited out
                (its Retry-After) and the stream opened again.
        """
        cursor = last_event_id
        refusal: Call[Json] = Call("GET", STREAM_PATH, _raw)
        while True:
            headers = {**self.headers, "Accept": "text/event-stream"}
            if cursor:
                headers["Last-Event-ID"] = cursor
            timeout = httpx.Timeout(DEFAULT_TIMEOUT_S, read=idle_timeout_s)
            wait_s = reconnect_s
            try:
                with self.http.stream("GET", STREAM_PATH, headers=headers, timeout=timeout) as response:
                    if response.status_code >= 400:
                        response.read()
                        try:
                            self._answer(refusal, response)
                        except ReviewloopError as error:
                            if error.code not in _STREAM_RETRIED:
                                raise
                            wait_s = max(error.retry_after or 0, reconnect_s)
                    else:
                        for sse in httpx_sse.EventSource(response).iter_sse():
                            if item := _streamed(sse):
                                cursor = item.id or cursor
                                yield item
            except httpx.TransportError:
                pass  # reconnect below, resuming after the last event yielded
            time.sleep(wait_s)

    send_email = _sync(Verbs.send_email)
    reply_to_email = _sync(Verbs.reply_to_email)
    reply_to_thread = _sync(Verbs.reply_to_thread)
    forward_email = _sync(Verbs.forward_email)
    get_review = _sync(Verbs.get_review)
    get_review_turns = _sync(Verbs.get_review_turns)
    get_review_decision_context = _sync(Verbs.get_review_decision_context)
    list_reviews = _sync(Verbs.list_reviews)
    submit_revision = _sync(Verbs.submit_revision)
    restamp_review = _sync(Verbs.restamp_review)
    cancel_review = _sync(Verbs.cancel_review)
    post_review_chat = _sync(Verbs.post_review_chat)
    get_review_feedback = _sync(Verbs.get_review_feedback)
    list_review_events = _sync(Verbs.list_review_events)
    wait_for_review_event = _sync(Verbs.wait_for_review_event)
    ack_review_events = _sync(Verbs.ack_review_events)
    ack_review_event = _sync(Verbs.ack_review_event)
    get_rules = _sync(Verbs.get_rules)
    save_rule = _sync(Verbs.save_rule)
    get_rule_audit = _sync(Verbs.get_rule_audit)
    learn_review_rule = _sync(Verbs.learn_review_rule)
    retire_rule = _sync(Verbs.retire_rule)
    promote_rule = _sync(Verbs.promote_rule)
    undo_rule_change = _sync(Verbs.undo_rule_change)
    update_category = _sync(Verbs.update_category)
    list_categories = _sync(Verbs.list_categories)
    create_category = _sync(Verbs.create_category)
    get_category = _sync(Verbs.get_category)
    merge_categories = _sync(Verbs.merge_categories)
    get_category_audit = _sync(Verbs.get_category_audit)
    get_backlog_status = _sync(Verbs.get_backlog_status)
    get_pacing_state = _sync(Verbs.get_pacing_state)
    get_graduation_status = _sync(Verbs.get_graduation_status)
    propose_graduation = _sync(Verbs.propose_graduation)
    list_graduation_proposals_of_category = _sync(Verbs.list_graduation_proposals_of_category)
    reject_graduation_proposal = _sync(Verbs.reject_graduation_proposal)
    get_risk_dial = _sync(Verbs.get_risk_dial)
    get_effective_review_policy = _sync(Verbs.get_effective_review_policy)
    resolve_delivery = _sync(Verbs.resolve_delivery)
    record_review_run = _sync(Verbs.record_review_run)
    list_dead_letters = _sync(Verbs.list_dead_letters)
    retry_dead_letter = _sync(Verbs.retry_dead_letter)
    discard_dead_letter = _sync(Verbs.discard_dead_letter)
    list_blocked_and_suppressed = _sync(Verbs.list_blocked_and_suppressed)
    unblock_recipient = _sync(Verbs.unblock_recipient)
    unsuppress_recipient = _sync(Verbs.unsuppress_recipient)
    get_contract_manifest = _sync(Verbs.get_contract_manifest)


TERMINAL_REASONS = frozenset({"sent", "send_failed", "cancelled", "front_run_next"})
"""Nudge reasons after which a review produces nothing more for its composer (spec 000, terminal events)."""

__all__ = [
    "TERMINAL_REASONS",
    "AsyncReviewloop",
    "Call",
    "Reviewloop",
    "ReviewloopError",
    "Verbs",
    "is_retryable",
]


class WebhookVerificationError(standardwebhooks.WebhookVerificationError):
    """A webhook request whose signature or timestamp does not verify: answer it 400 and drop it.

    The Standard Webhooks library's error, so a receiver catching that one catches this one too.
    """


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> None:
    """Check a reviewloop webhook delivery (Standard Webhooks) before trusting its body.

    ``secret`` is the endpoint's ``whsec_...`` secret; ``headers`` the request headers (any case);
    ``body`` the raw request body, exactly as received. The signature is checked by the maintained
    ``standardwebhooks`` library (HMAC-SHA256 over ``"{webhook-id}.{webhook-timestamp}.{body}"``);
    ``webhook-signature`` may carry several ``v1,<base64>`` values (during a secret rotation both secrets
    sign), and one match suffices. The timestamp window is checked here, since the library's is fixed at
    five minutes of the wall clock. Dedupe on ``webhook-id``: delivery is at-least-once.

    Raises:
        WebhookVerificationError: Missing headers, a timestamp more than ``tolerance_s`` away from
            ``now``, or no signature made with ``secret``.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id, stamp, signatures = (
        lowered.get("webhook-id"),
        lowered.get("webhook-timestamp"),
        lowered.get("webhook-signature"),
    )
    if not msg_id or not stamp or not signatures:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        sent_at = int(stamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number of seconds") from None
    if abs((time.time() if now is None else now) - sent_at) > tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too old or too far in the future")
    # The library's own comparison, with the library's signature for the header's timestamp.
    expected = (
        standardwebhooks.Webhook(secret).sign(msg_id, datetime.fromtimestamp(sent_at, UTC), body).encode()
    )
    if not any(hmac.compare_digest(expected, given.encode()) for given in signatures.split(" ")):
        raise WebhookVerificationError("no signature matches this secret")
