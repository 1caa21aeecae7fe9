"""The error model: one closed set of codes and one exception, free of any transport.

A domain error carries the spec's closed problem ``code``, a ``detail`` that says the whole fix,
and the recovery facts of the 409 taxonomy. Domains raise it and import nothing else of ``libs``
but ``reviewloop.ids``; ``reviewloop.rpc_errors`` packs it into ``google.rpc.Status`` at the gRPC
edge, and the gateway turns it into RFC 9457 problem+json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class Code(StrEnum):
    """The closed problem ``code`` enum: exactly the spec's 30 codes (spec 000 and its SDK).

    Clients coerce an unknown code to ``internal``, so nothing outside the 30 is ever sent. A failure
    the spec has no code of its own for answers the nearest code and keeps its HTTP status: a body over
    the limit is ``bad_request`` (413), a backend past its deadline ``unavailable`` (504), and the wrong
    kind of key for a verb ``forbidden_scope`` (403).
    """

    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN_SCOPE = "forbidden_scope"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    SUPPORT_RECORD_DELETED = "support_record_deleted"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    BREADTH_REQUIRED = "breadth_required"
    QUOTA_EXCEEDED = "quota_exceeded"
    RATE_LIMITED = "rate_limited"
    DOMAIN_NOT_ALLOWED = "domain_not_allowed"
    RECIPIENT_BLOCKED = "recipient_blocked"
    RECIPIENT_SUPPRESSED = "recipient_suppressed"
    NOT_CONFIGURED = "not_configured"
    DOMAIN_UNAVAILABLE = "domain_unavailable"
    INTERNAL = "internal"
    REPLY_CONTEXT_REQUIRED = "reply_context_required"
    REPLY_CONTEXT_CHANGED = "reply_context_changed"
    REPLY_WORKFLOW_REQUIRED = "reply_workflow_required"
    REPLY_ALREADY_PENDING = "reply_already_pending"
    INTENT_REQUIRED = "intent_required"
    WRONG_STATE = "wrong_state"
    TERMINAL = "terminal"
    STALE = "stale"
    BORN_STALE = "born_stale"
    SEND_NEEDS_RECONCILIATION = "send_needs_reconciliation"
    GRADUATION_LOCKED = "graduation_locked"
    MATURITY_GATE_UNMET = "maturity_gate_unmet"
    SCOPE_TAKEN = "scope_taken"
    UNAVAILABLE = "unavailable"


# The HTTP status the gateway answers each code with (its gRPC status is in reviewloop.rpc_errors).
_HTTP_STATUS: dict[Code, int] = {
    Code.BAD_REQUEST: 400,
    Code.UNAUTHORIZED: 401,
    Code.FORBIDDEN_SCOPE: 403,
    Code.NOT_FOUND: 404,
    Code.CONFLICT: 409,
    Code.SUPPORT_RECORD_DELETED: 410,
    Code.IDEMPOTENCY_CONFLICT: 409,
    Code.BREADTH_REQUIRED: 400,
    Code.QUOTA_EXCEEDED: 403,
    Code.RATE_LIMITED: 429,
    Code.DOMAIN_NOT_ALLOWED: 403,
    Code.RECIPIENT_BLOCKED: 403,
    Code.RECIPIENT_SUPPRESSED: 422,
    Code.NOT_CONFIGURED: 422,
    Code.DOMAIN_UNAVAILABLE: 422,
    Code.INTERNAL: 500,
    Code.REPLY_CONTEXT_REQUIRED: 422,
    Code.REPLY_CONTEXT_CHANGED: 409,
    Code.REPLY_WORKFLOW_REQUIRED: 422,
    Code.REPLY_ALREADY_PENDING: 409,
    Code.INTENT_REQUIRED: 422,
    Code.WRONG_STATE: 409,
    Code.TERMINAL: 409,
    Code.STALE: 409,
    Code.BORN_STALE: 409,
    Code.SEND_NEEDS_RECONCILIATION: 409,
    Code.GRADUATION_LOCKED: 409,
    Code.MATURITY_GATE_UNMET: 409,
    Code.SCOPE_TAKEN: 409,
    Code.UNAVAILABLE: 503,
}

# Which problems are worth repeating (the SDK's REVIEW_PROBLEM_RETRYABLE, widened to all 30 codes), and how
# often (NOTES.md). None of them is repeated blind: ``stale`` and ``reply_context_changed`` after a re-read and
# re-applying the change on top, ``born_stale`` after ``get_rules`` and a redraft (once per rule high-water),
# ``unavailable`` after its Retry-After with the same Idempotency-Key. Every other code fails identically
# until the request itself changes.
REVIEW_PROBLEM_RETRYABLE: Final[Mapping[str, bool]] = MappingProxyType(
    {
        code.value: code in (Code.STALE, Code.BORN_STALE, Code.REPLY_CONTEXT_CHANGED, Code.UNAVAILABLE)
        for code in Code
    }
)
REVIEW_PROBLEM_RETRY_LIMITS: Final[Mapping[str, int]] = MappingProxyType(
    {Code.STALE.value: 3, Code.BORN_STALE.value: 1}  # born_stale: once per rule high-water
)


def is_retryable(code: str) -> bool:
    """Whether a problem with ``code`` is worth repeating (an unknown code reads as ``internal``: no)."""
    return REVIEW_PROBLEM_RETRYABLE.get(code, False)


_TITLES: dict[Code, str] = {
    Code.INTENT_REQUIRED: "An intent is required",
    Code.STALE: "The revision you named is no longer current",
    Code.BORN_STALE: "The draft was built against older rules",
    Code.WRONG_STATE: "That verb is not legal in the review's current state",
    Code.TERMINAL: "The review is already closed",
    Code.SEND_NEEDS_RECONCILIATION: "A send attempt is awaiting reconciliation",
    Code.IDEMPOTENCY_CONFLICT: "The Idempotency-Key was used with a different body",
}


def http_status(code: Code) -> int:
    """The HTTP status of ``code`` (``409`` for every conflict of the taxonomy)."""
    return _HTTP_STATUS[code]


def status_of(error: DomainError) -> int:
    """The HTTP status the gateway answers ``error`` with.

    The status it carries (413, 504), else a ``422`` for a validation error that names its fields (the
    same at the edge and in every service), else its code's.
    """
    if error.status is not None:
        return error.status
    if error.code is Code.BAD_REQUEST and error.violations:
        return 422
    return _HTTP_STATUS[error.code]


def title(code: Code) -> str:
    """The problem+json ``title`` of ``code``: a fixed phrase, the same for every occurrence."""
    return _TITLES.get(code, code.value.replace("_", " ").capitalize())


@dataclass(frozen=True)
class FieldViolation:
    """A bad field: ``field`` is a JSON pointer into the request body (``/intent/summary``)."""

    field: str
    description: str


@dataclass
class DomainError(Exception):
    """A failure the caller can act on. ``detail`` must say the whole fix in one sentence or two."""

    code: Code
    detail: str
    state: str | None = None
    revision: int | None = None
    version: int | None = None
    allowed_actions: Sequence[str] = ()
    sent_message_id: str | None = None
    hints: Sequence[tuple[str, str]] = ()
    violations: Sequence[FieldViolation] = field(default_factory=tuple)
    # The HTTP status, where the failure is more specific than its code's usual one (see ``Code``).
    status: int | None = None
    # The text of a refused send, handed back so the agent can fix the request without re-composing.
    unsent_text: str | None = None

    def __post_init__(self) -> None:
        super().__init__(f"{self.code}: {self.detail}")


def invalid(field_pointer: str, description: str, code: Code = Code.BAD_REQUEST) -> DomainError:
    """A one-field validation error whose detail names the field."""
    return DomainError(
        code, f"{field_pointer}: {description}", violations=(FieldViolation(field_pointer, description),)
    )
