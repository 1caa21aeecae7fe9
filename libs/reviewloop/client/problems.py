"""The client's errors: a problem+json answer, an unreachable gateway, and the published retry table."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from reviewloop.errors import is_retryable as _is_retryable
from reviewloop.shapes import Problem


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

    def __init__(self, status: int, problem: dict[str, Any], retry_after: float | None = None) -> None:
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

    @classmethod
    def of(cls, response: httpx.Response) -> ReviewloopError:
        """The problem a (read) ``4xx`` / ``5xx`` answer carries; a body that is not JSON reads as ``internal``."""
        try:
            problem = response.json()
        except ValueError:
            problem = {"status": response.status_code, "code": "internal", "detail": response.text}
        return cls(response.status_code, problem, retry_after(response))

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

    The manifest serves the table, with ``review_problem_retry_limits``. Never blind: the client itself
    repeats only ``503 unavailable`` (same Idempotency-Key, after its Retry-After). ``stale`` (at most 3
    times) and ``reply_context_changed`` are worth repeating after a re-read and re-applying your change on
    top of what is there now; ``born_stale`` once per rule high-water, after ``get_rules`` and a redraft (or
    an honest restamp). Every other code fails again until the request itself changes.

    Args:
        problem: A :class:`ReviewloopError`, or a problem+json body.
    """
    code = problem.code if isinstance(problem, ReviewloopError) else str(problem.get("code", "internal"))
    return _is_retryable(code)


def retry_after(response: httpx.Response) -> float | None:
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
