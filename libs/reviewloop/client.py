"""The typed Python client of the agent contract (spec 000), async and sync, over httpx.

Example::

    async with AsyncReviewloop("http://127.0.0.1:8080", api_key) as rl:
        sent = await rl.send_email(to=["vp@acme.com"], subject="Q3 pilot", body_text="...",
                                   intent={"summary": "Re-engage cold lead at Acme about Q3 pilot"})
        for event in (await rl.wait_for_review_event(timeout_s=30)).events: ...

Every verb is built once as a :class:`Call` (route, arguments, answer shape) and run by either client, so
the two can never disagree. Answers parse into the contract's shapes, ignoring fields this client does not
know yet (the contract grows additively across 0.x). A failure raises :class:`ReviewloopError` carrying the
problem+json: branch on ``error.code``. Every mutation carries an ``Idempotency-Key`` (a fresh one unless you
pass yours), so the client's own retry of a ``503 unavailable`` can never double a write.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from reviewloop.contract import CONTRACT_VERSION
from reviewloop.shapes import (
    AckReviewEventsResult,
    Category,
    CategoryList,
    ContractManifest,
    GraduationStatus,
    Problem,
    Review,
    ReviewEventList,
    ReviewFeedback,
    ReviewList,
    RiskDial,
    Rule,
    RuleList,
    SubmitResult,
)

T = TypeVar("T")
P = ParamSpec("P")
M = TypeVar("M", bound=BaseModel)
Json = dict[str, Any]

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 2


class ReviewloopError(Exception):
    """A problem+json answer. ``code`` is the closed enum (unknown codes read as ``internal``);
    ``facts`` holds the recovery facts (``state``, ``revision``, ``version``, ``allowed_action``...).
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
        """Every recovery fact named ``name`` (``allowed_action`` repeats; the others appear once)."""
        return [e.get("detail") for e in self.problem.get("errors") or [] if e.get("code") == name]

    @property
    def allowed_actions(self) -> list[str]:
        return [str(v) for v in self.facts("allowed_action")]


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
        return self.method != "GET"


def _id(value: str) -> str:
    return quote(value, safe="")


def _drop_none(values: Mapping[str, Any]) -> Json:
    return {k: v for k, v in values.items() if v is not None}


class Verbs:
    """Builds the Call of every agent verb (DESIGN.md's agent-plane table), named as the spec names it."""

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
    ) -> Call[SubmitResult]:
        body = _drop_none(
            dict(
                to=list(to),
                cc=list(cc) or None,
                bcc=list(bcc) or None,
                subject=subject,
                body_text=body_text,
                intent=intent,
                category_id=category_id,
                composition_token=composition_token,
                **extra,
            )
        )
        return Call("POST", "/v1/messages", _shape(SubmitResult), body=body, idempotency_key=idempotency_key)

    @staticmethod
    def reply_to_email(
        message_id: str,
        *,
        body_text: str,
        intent: Json | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> Call[SubmitResult]:
        body = _drop_none(dict(body_text=body_text, intent=intent, **extra))
        return Call(
            "POST", f"/v1/messages/{_id(message_id)}/reply", _shape(SubmitResult), body=body,
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
    ) -> Call[SubmitResult]:
        body = _drop_none(dict(to=list(to), body_text=body_text, intent=intent, **extra))
        return Call(
            "POST", f"/v1/messages/{_id(message_id)}/forward", _shape(SubmitResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def get_review(review_id: str) -> Call[Review]:
        return Call("GET", f"/v1/reviews/{_id(review_id)}", _shape(Review))

    @staticmethod
    def list_reviews(
        *,
        state: Sequence[str] = (),
        agent_id: str | None = None,
        category_id: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Call[ReviewList]:
        params = _drop_none(
            dict(
                state=list(state) or None,
                agent_id=agent_id,
                category_id=category_id,
                cursor=cursor,
                limit=limit,
            )
        )
        return Call("GET", "/v1/reviews", _shape(ReviewList), params=params)

    @staticmethod
    def submit_revision(
        review_id: str, *, parent_revision: int, idempotency_key: str | None = None, **fields: Any
    ) -> Call[Review]:
        """``fields``: the redraft (``subject``, ``body_text``, ``composition_token``, ...)."""
        body = _drop_none(dict(parent_revision=parent_revision, **fields))
        return Call(
            "POST", f"/v1/reviews/{_id(review_id)}/revisions", _shape(Review), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def restamp_review(
        review_id: str, *, parent_revision: int, idempotency_key: str | None = None, **fields: Any
    ) -> Call[Review]:
        body = _drop_none(dict(parent_revision=parent_revision, **fields))
        return Call(
            "POST", f"/v1/reviews/{_id(review_id)}/restamp", _shape(Review), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def cancel_review(
        review_id: str, *, parent_revision: int, idempotency_key: str | None = None
    ) -> Call[Review]:
        return Call(
            "POST", f"/v1/reviews/{_id(review_id)}/cancel", _shape(Review),
            body={"parent_revision": parent_revision}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def post_review_chat(review_id: str, *, text: str, idempotency_key: str | None = None) -> Call[Json]:
        return Call(
            "POST", f"/v1/reviews/{_id(review_id)}/chat", _raw, body={"text": text},
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def get_review_feedback(review_id: str) -> Call[ReviewFeedback]:
        return Call("GET", f"/v1/reviews/{_id(review_id)}/feedback", _shape(ReviewFeedback))

    @staticmethod
    def list_review_events(*, limit: int | None = None, cursor: str | None = None) -> Call[ReviewEventList]:
        params = _drop_none(dict(limit=limit, cursor=cursor))
        return Call("GET", "/v1/review-events", _shape(ReviewEventList), params=params)

    @staticmethod
    def wait_for_review_event(*, timeout_s: float = 30.0, limit: int | None = None) -> Call[ReviewEventList]:
        params = _drop_none(dict(timeout_s=timeout_s, limit=limit))
        # The server holds the request up to timeout_s: read for longer than that.
        return Call(
            "GET", "/v1/review-events/wait", _shape(ReviewEventList), params=params, timeout_s=timeout_s + 10
        )

    @staticmethod
    def ack_review_events(
        acks: Sequence[tuple[str, int]], *, idempotency_key: str | None = None
    ) -> Call[AckReviewEventsResult]:
        body = {"acks": [{"review_id": review_id, "seq": seq} for review_id, seq in acks]}
        return Call(
            "POST", "/v1/review-events/ack", _shape(AckReviewEventsResult), body=body,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def get_rules(*, scope: str | None = None, category_id: str | None = None) -> Call[RuleList]:
        """Unfiltered, the answer carries the ``composition_token`` to pass with the draft."""
        return Call(
            "GET",
            "/v1/rules",
            _shape(RuleList),
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
        body = _drop_none(dict(rule_text=rule_text, scope=scope, category_id=category_id, **fields))
        return Call("POST", "/v1/rules", _shape(Rule), body=body, idempotency_key=idempotency_key)

    @staticmethod
    def list_categories(*, cursor: str | None = None) -> Call[CategoryList]:
        return Call("GET", "/v1/categories", _shape(CategoryList), params=_drop_none(dict(cursor=cursor)))

    @staticmethod
    def create_category(
        *, name: str, description: str = "", idempotency_key: str | None = None, **fields: Any
    ) -> Call[Category]:
        body = _drop_none(dict(name=name, description=description, **fields))
        return Call("POST", "/v1/categories", _shape(Category), body=body, idempotency_key=idempotency_key)

    @staticmethod
    def get_graduation_status(category_id: str) -> Call[GraduationStatus]:
        return Call("GET", f"/v1/categories/{_id(category_id)}/graduation", _shape(GraduationStatus))

    @staticmethod
    def propose_graduation(
        category_id: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> Call[Json]:
        return Call(
            "POST", f"/v1/categories/{_id(category_id)}/graduation-proposals", _raw, body=dict(fields),
            idempotency_key=idempotency_key,
        )  # fmt: skip

    @staticmethod
    def get_risk_dial(*, category_id: str | None = None) -> Call[RiskDial]:
        return Call(
            "GET", "/v1/risk-dial", _shape(RiskDial), params=_drop_none(dict(category_id=category_id))
        )

    @staticmethod
    def get_effective_review_policy() -> Call[Json]:
        return Call("GET", "/v1/review-policy", _raw)

    @staticmethod
    def get_contract_manifest() -> Call[ContractManifest]:
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
            retry_after = response.headers.get("retry-after")
            raise ReviewloopError(
                response.status_code,
                problem,
                float(retry_after) if retry_after and retry_after.isdigit() else None,
            )
        return call.parse(response.json())

    def _retryable(self, error: ReviewloopError, attempt: int) -> bool:
        # Only `unavailable` is safe to repeat, and only because every mutation carries its Idempotency-Key.
        return error.code == "unavailable" and attempt < self.max_retries


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
        await self.http.aclose()

    async def run(self, call: Call[T]) -> T:
        """Run one verb (``await rl.run(Verbs.get_review(id))``); every verb method is this."""
        request = self._request(call)
        attempt = 0
        while True:
            try:
                return self._answer(call, await self.http.request(**request))
            except ReviewloopError as error:
                if not self._retryable(error, attempt):
                    raise
                attempt += 1
                await asyncio.sleep(error.retry_after or 1.0)

    send_email = _async(Verbs.send_email)
    reply_to_email = _async(Verbs.reply_to_email)
    forward_email = _async(Verbs.forward_email)
    get_review = _async(Verbs.get_review)
    list_reviews = _async(Verbs.list_reviews)
    submit_revision = _async(Verbs.submit_revision)
    restamp_review = _async(Verbs.restamp_review)
    cancel_review = _async(Verbs.cancel_review)
    post_review_chat = _async(Verbs.post_review_chat)
    get_review_feedback = _async(Verbs.get_review_feedback)
    list_review_events = _async(Verbs.list_review_events)
    wait_for_review_event = _async(Verbs.wait_for_review_event)
    ack_review_events = _async(Verbs.ack_review_events)
    get_rules = _async(Verbs.get_rules)
    save_rule = _async(Verbs.save_rule)
    list_categories = _async(Verbs.list_categories)
    create_category = _async(Verbs.create_category)
    get_graduation_status = _async(Verbs.get_graduation_status)
    propose_graduation = _async(Verbs.propose_graduation)
    get_risk_dial = _async(Verbs.get_risk_dial)
    get_effective_review_policy = _async(Verbs.get_effective_review_policy)
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
        self.http.close()

    def run(self, call: Call[T]) -> T:
        request = self._request(call)
        attempt = 0
        while True:
            try:
                return self._answer(call, self.http.request(**request))
            except ReviewloopError as error:
                if not self._retryable(error, attempt):
                    raise
                attempt += 1
                time.sleep(error.retry_after or 1.0)

    send_email = _sync(Verbs.send_email)
    reply_to_email = _sync(Verbs.reply_to_email)
    forward_email = _sync(Verbs.forward_email)
    get_review = _sync(Verbs.get_review)
    list_reviews = _sync(Verbs.list_reviews)
    submit_revision = _sync(Verbs.submit_revision)
    restamp_review = _sync(Verbs.restamp_review)
    cancel_review = _sync(Verbs.cancel_review)
    post_review_chat = _sync(Verbs.post_review_chat)
    get_review_feedback = _sync(Verbs.get_review_feedback)
    list_review_events = _sync(Verbs.list_review_events)
    wait_for_review_event = _sync(Verbs.wait_for_review_event)
    ack_review_events = _sync(Verbs.ack_review_events)
    get_rules = _sync(Verbs.get_rules)
    save_rule = _sync(Verbs.save_rule)
    list_categories = _sync(Verbs.list_categories)
    create_category = _sync(Verbs.create_category)
    get_graduation_status = _sync(Verbs.get_graduation_status)
    propose_graduation = _sync(Verbs.propose_graduation)
    get_risk_dial = _sync(Verbs.get_risk_dial)
    get_effective_review_policy = _sync(Verbs.get_effective_review_policy)
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
]
